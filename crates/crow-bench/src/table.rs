//! The report: rows of figures with their targets, rendered as a plain-text table.

use std::fmt::Write;

use crate::stats::Summary;

/// How a figure prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Ms,
    /// Microseconds, for per-item costs well under a millisecond.
    Us,
    MiB,
    Bytes,
    Percent,
    /// A plain number of things.
    Count,
}

impl Unit {
    /// A round number as people write it ("5 ms", "15 KiB"), for targets.
    pub fn format_round(self, value: f64) -> String {
        let text = self.format(value);
        match text.split_once(' ') {
            Some((number, unit)) if number.contains('.') => {
                let number = number.trim_end_matches('0').trim_end_matches('.');
                format!("{number} {unit}")
            }
            _ => text,
        }
    }

    pub fn format(self, value: f64) -> String {
        match self {
            Unit::Ms if value.abs() >= 1000.0 => format!("{:.2} s", value / 1000.0),
            Unit::Ms if value.abs() >= 100.0 => format!("{value:.0} ms"),
            Unit::Ms if value.abs() >= 10.0 => format!("{value:.1} ms"),
            Unit::Ms => format!("{value:.2} ms"),
            Unit::Us => format!("{value:.1} µs"),
            Unit::MiB => format!("{value:.1} MiB"),
            Unit::Bytes if value >= 1024.0 * 1024.0 => {
                format!("{:.1} MiB", value / 1024.0 / 1024.0)
            }
            Unit::Bytes if value >= 1024.0 => format!("{:.1} KiB", value / 1024.0),
            Unit::Bytes => format!("{value:.0} B"),
            Unit::Percent => format!("{value:.0}%"),
            Unit::Count => format!("{value:.0}"),
        }
    }
}

/// An upper bound the median must stay under.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub max: f64,
    /// How the target reads in the table, e.g. "≤ 5 ms".
    pub label: String,
}

impl Target {
    pub fn at_most(max: f64, unit: Unit) -> Self {
        Self {
            max,
            label: format!("≤ {}", unit.format_round(max)),
        }
    }

    /// A lower bound (prefix stability must reach 100%).
    pub fn at_least_percent(min: f64) -> Self {
        Self {
            max: -min,
            label: format!("{min:.0}%"),
        }
    }

    fn met(&self, value: f64) -> bool {
        if self.max < 0.0 {
            value >= -self.max
        } else {
            value <= self.max
        }
    }
}

/// What a row holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Figure {
    /// Repeated samples: median and min–max.
    Stats(Summary),
    /// One derived number (no spread of its own).
    Single(f64),
    /// Not measured, and why.
    Missing(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub label: String,
    pub figure: Figure,
    pub unit: Unit,
    pub target: Option<Target>,
    pub note: String,
}

impl Row {
    pub fn stats(label: impl Into<String>, summary: Option<Summary>, unit: Unit) -> Self {
        Self {
            label: label.into(),
            figure: summary.map_or_else(|| Figure::Missing("no samples".into()), Figure::Stats),
            unit,
            target: None,
            note: String::new(),
        }
    }

    pub fn single(label: impl Into<String>, value: f64, unit: Unit) -> Self {
        Self {
            label: label.into(),
            figure: if value.is_finite() {
                Figure::Single(value)
            } else {
                Figure::Missing("no samples".into())
            },
            unit,
            target: None,
            note: String::new(),
        }
    }

    pub fn missing(label: impl Into<String>, why: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            figure: Figure::Missing(why.into()),
            unit: Unit::Ms,
            target: None,
            note: String::new(),
        }
    }

    pub fn target(mut self, target: Target) -> Self {
        self.target = Some(target);
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }

    /// The headline value: the median, or the single figure.
    pub fn value(&self) -> Option<f64> {
        match &self.figure {
            Figure::Stats(s) => Some(s.median),
            Figure::Single(v) => Some(*v),
            Figure::Missing(_) => None,
        }
    }

    /// `Some(true)` when the figure meets its target.
    pub fn met(&self) -> Option<bool> {
        Some(self.target.as_ref()?.met(self.value()?))
    }
}

/// A titled group of rows (one per measurement of the issue).
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    pub title: String,
    pub rows: Vec<Row>,
}

/// Renders sections as an aligned text table.
pub fn render(sections: &[Section]) -> String {
    let head = ["figure", "median", "min–max", "target", "", "note"];
    let mut cells: Vec<Option<[String; 6]>> = Vec::new();
    for section in sections {
        cells.push(None);
        for row in &section.rows {
            let (median, range) = match &row.figure {
                Figure::Stats(s) => (
                    row.unit.format(s.median),
                    format!("{} – {}", row.unit.format(s.min), row.unit.format(s.max)),
                ),
                Figure::Single(v) => (row.unit.format(*v), String::new()),
                Figure::Missing(why) => ("—".to_owned(), why.clone()),
            };
            let mark = match row.met() {
                Some(true) => "✓",
                Some(false) => "✗",
                None => "",
            };
            cells.push(Some([
                format!("  {}", row.label),
                median,
                range,
                row.target
                    .as_ref()
                    .map(|t| t.label.clone())
                    .unwrap_or_default(),
                mark.to_owned(),
                row.note.clone(),
            ]));
        }
    }
    let width = |i: usize| {
        cells
            .iter()
            .flatten()
            .map(|c| c[i].chars().count())
            .chain([head[i].chars().count()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..6).map(width).collect();
    let line = |out: &mut String, c: &[&str]| {
        let mut text = String::new();
        for (i, cell) in c.iter().enumerate() {
            let pad = widths[i].saturating_sub(cell.chars().count());
            // Numbers right-aligned, words left-aligned.
            if i == 1 {
                let _ = write!(text, "{}{cell}  ", " ".repeat(pad));
            } else if i == 5 {
                text.push_str(cell);
            } else {
                let _ = write!(text, "{cell}{}  ", " ".repeat(pad));
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    let mut out = String::new();
    line(&mut out, &head);
    let mut titles = sections.iter().map(|s| s.title.as_str());
    for row in &cells {
        match row {
            None => {
                let _ = writeln!(out, "{}", titles.next().unwrap_or_default());
            }
            Some(c) => line(&mut out, &c.each_ref().map(String::as_str)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summarize;

    #[test]
    fn renders_targets_and_missing_rows() {
        let sections = vec![Section {
            title: "1. overhead".into(),
            rows: vec![
                Row::stats("per iteration", summarize(&[1.0, 2.0, 9.0]), Unit::Ms)
                    .target(Target::at_most(5.0, Unit::Ms)),
                Row::single("prefix", 50.0, Unit::Percent).target(Target::at_least_percent(100.0)),
                Row::missing("store", "not yet"),
            ],
        }];
        let text = render(&sections);
        assert!(text.contains("2.00 ms"), "{text}");
        assert!(text.contains("1.00 ms – 9.00 ms"), "{text}");
        assert!(text.contains('✓') && text.contains('✗'), "{text}");
        assert!(text.contains("not yet"), "{text}");
        assert_eq!(Unit::Bytes.format(15360.0), "15.0 KiB");
        assert_eq!(Unit::Bytes.format_round(15360.0), "15 KiB");
        assert_eq!(Unit::Ms.format_round(1100.0), "1.1 s");
    }
}
