#!/usr/bin/env python3
"""Posts crow's review of a pull request to GitHub as ONE review (standard library only).

Reads the JSON `crow review --json` printed (or the JSON lines of `crow run --json`, whose
`result` line's answer becomes the body), writes the markdown to $GITHUB_STEP_SUMMARY when
set, and POSTs /repos/{owner}/{repo}/pulls/{n}/reviews: the summary and the findings without
a line in the body, one inline comment per finding with a line. When GitHub answers 422 (a
line outside the diff), it posts once more with the inline comments folded into the body.

Environment: GITHUB_API_URL (default https://api.github.com), GITHUB_REPOSITORY,
GITHUB_TOKEN, GITHUB_EVENT_PATH (for pull_request.number and pull_request.head.sha),
CROW_PR / CROW_COMMIT to override them, GITHUB_SHA as the last resort for the commit.

Exit codes: 0 posted (or nothing to post: --summary-only, --dry-run); 1 the API refused or
could not be reached (its message is printed, never the token); 2 bad input (no review file,
no pull request number, no token).
"""

import argparse
import json
import os
import sys
import urllib.error
import urllib.request

MAX_BODY = 60000  # GitHub refuses bodies over 65,536 characters
SEVERITY_MARK = {"high": "🔴 high", "medium": "🟠 medium", "low": "🟡 low"}


class InputError(Exception):
    pass


def load_result(path):
    """The review object, or a review-shaped object made from a `crow run` result line."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}")
    text = text.strip()
    if not text:
        raise InputError(f"{path} is empty (did crow fail before printing its result?)")
    try:
        obj = json.loads(text)
        if isinstance(obj, dict):
            return normalise(obj)
    except json.JSONDecodeError:
        pass
    # JSON lines (crow run --json): the last `result` line.
    result = None
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and obj.get("type") == "result":
            result = obj
    if result is None:
        raise InputError(f"{path} holds neither a review object nor a result line")
    return normalise(result)


def normalise(obj):
    if obj.get("type") == "result":
        return {
            "type": "result",
            "verdict": None,
            "summary": str(obj.get("answer") or ""),
            "findings": [],
        }
    findings = obj.get("findings") or []
    if not isinstance(findings, list):
        raise InputError("findings is not a list")
    return {
        "type": "review",
        "verdict": obj.get("verdict"),
        "summary": str(obj.get("summary") or ""),
        "findings": [f for f in findings if isinstance(f, dict)],
    }


def verdict_text(verdict):
    return {"approve": "approve", "request_changes": "changes requested"}.get(
        verdict, str(verdict)
    )


def inline(finding):
    """Whether a finding can be an inline comment: it names a file and a line."""
    return bool(finding.get("file")) and isinstance(finding.get("line"), int)


def finding_heading(finding):
    severity = SEVERITY_MARK.get(finding.get("severity"), finding.get("severity") or "note")
    title = finding.get("title") or "(untitled)"
    return f"**[{severity}] {title}**"


def finding_markdown(finding, with_location):
    parts = [finding_heading(finding)]
    if with_location:
        where = location(finding)
        if where:
            parts[0] += f" — `{where}`"
    body = (finding.get("body") or "").strip()
    if body:
        parts.append(body)
    return "\n\n".join(parts)


def location(finding):
    file = finding.get("file")
    if not file:
        return ""
    line, end = finding.get("line"), finding.get("end_line")
    if isinstance(line, int):
        if isinstance(end, int) and end > line:
            return f"{file}:{line}-{end}"
        return f"{file}:{line}"
    return file


def comment(finding):
    c = {"path": finding["file"], "side": "RIGHT", "body": finding_markdown(finding, False)}
    line, end = finding["line"], finding.get("end_line")
    if isinstance(end, int) and end > line:
        # A range: GitHub's `line` is its last line, `start_line` its first.
        c["start_line"] = line
        c["start_side"] = "RIGHT"
        c["line"] = end
    else:
        c["line"] = line
    return c


def body_markdown(result, folded):
    """The review's body: summary, the findings in `folded`, and crow's footer."""
    parts = []
    summary = result["summary"].strip()
    if summary:
        parts.append(summary)
    if folded:
        parts.append("### Findings")
        parts.extend(finding_markdown(f, True) for f in folded)
    # CROW_ACTION_REPOSITORY: where the action (so crow) comes from, not the reviewed repo.
    home = os.environ.get("CROW_ACTION_REPOSITORY")
    footer = f"Reviewed by [crow](https://github.com/{home})" if home else "Reviewed by crow"
    if result["verdict"]:
        footer += f" · verdict: **{verdict_text(result['verdict'])}**"
    parts.append("---\n<sub>" + footer + "</sub>")
    body = "\n\n".join(parts)
    if len(body) > MAX_BODY:
        body = body[:MAX_BODY] + "\n\n… (cut: too long for a GitHub review)"
    return body


def summary_markdown(result):
    """The job summary: everything, with locations."""
    title = "## crow review" if result["type"] == "review" else "## crow"
    return title + "\n\n" + body_markdown(result, result["findings"]) + "\n"


def request_body(result, event, commit, fold_all):
    if fold_all:
        comments, folded = [], result["findings"]
    else:
        comments = [comment(f) for f in result["findings"] if inline(f)]
        folded = [f for f in result["findings"] if not inline(f)]
    body = {"body": body_markdown(result, folded), "event": event, "comments": comments}
    if commit:
        body["commit_id"] = commit
    return body


def read_event():
    path = os.environ.get("GITHUB_EVENT_PATH")
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            event = json.load(f)
    except (OSError, json.JSONDecodeError):
        return {}
    return event if isinstance(event, dict) else {}


def redact(text, token):
    return text.replace(token, "***") if token else text


def post(url, token, payload):
    """POSTs payload; returns (status, parsed answer or text)."""
    data = json.dumps(payload).encode("utf-8")
    req = urllib.request.Request(url, data=data, method="POST")
    req.add_header("Accept", "application/vnd.github+json")
    req.add_header("Authorization", f"Bearer {token}")
    req.add_header("X-GitHub-Api-Version", "2022-11-28")
    req.add_header("Content-Type", "application/json")
    req.add_header("User-Agent", "crow-action")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    text = raw.decode("utf-8", "replace")
    try:
        return status, json.loads(text)
    except json.JSONDecodeError:
        return status, text


def api_message(answer):
    if isinstance(answer, dict):
        msg = str(answer.get("message") or "")
        errors = answer.get("errors")
        if errors:
            msg += " " + json.dumps(errors)
        return msg.strip() or json.dumps(answer)
    return str(answer).strip()[:500]


def main(argv=None):
    p = argparse.ArgumentParser(description="Post crow's review to a GitHub pull request.")
    p.add_argument("review", nargs="?", default="review.json", help="crow's JSON output")
    p.add_argument("--pr", type=int, help="pull request number (default: CROW_PR, the event)")
    p.add_argument("--commit", help="head commit (default: CROW_COMMIT, the event, GITHUB_SHA)")
    p.add_argument(
        "--request-changes",
        action="store_true",
        help="post REQUEST_CHANGES when the verdict is request_changes (default COMMENT)",
    )
    p.add_argument("--summary-only", action="store_true", help="only the job summary")
    p.add_argument("--dry-run", action="store_true", help="print the request body, post nothing")
    args = p.parse_args(argv)

    token = os.environ.get("GITHUB_TOKEN", "")
    repo = os.environ.get("GITHUB_REPOSITORY", "")
    try:
        result = load_result(args.review)
    except InputError as e:
        print(f"post_review: {e}", file=sys.stderr)
        return 2

    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        with open(summary_path, "a", encoding="utf-8") as f:
            f.write(summary_markdown(result))
    if args.summary_only:
        return 0

    event_json = read_event()
    pr = event_json.get("pull_request") or {}
    number = args.pr or os.environ.get("CROW_PR") or pr.get("number")
    commit = (
        args.commit
        or os.environ.get("CROW_COMMIT")
        or (pr.get("head") or {}).get("sha")
        or os.environ.get("GITHUB_SHA")
    )
    event = "COMMENT"
    if args.request_changes and result["verdict"] == "request_changes":
        event = "REQUEST_CHANGES"

    payload = request_body(result, event, commit, False)
    if args.dry_run:
        print(json.dumps(payload, indent=2, ensure_ascii=False))
        return 0

    try:
        number = int(number)
    except (TypeError, ValueError):
        print(
            "post_review: no pull request number (not a pull_request event; pass --pr or "
            "set CROW_PR)",
            file=sys.stderr,
        )
        return 2
    if not repo or "/" not in repo:
        print("post_review: GITHUB_REPOSITORY is not owner/repo", file=sys.stderr)
        return 2
    if not token:
        print("post_review: GITHUB_TOKEN is not set", file=sys.stderr)
        return 2

    api = os.environ.get("GITHUB_API_URL", "https://api.github.com").rstrip("/")
    url = f"{api}/repos/{repo}/pulls/{number}/reviews"
    try:
        status, answer = post(url, token, payload)
        if status == 422 and payload["comments"]:
            print(
                "post_review: GitHub refused the inline comments ("
                + redact(api_message(answer), token)
                + "); posting them in the review's body instead",
                file=sys.stderr,
            )
            payload = request_body(result, event, commit, True)
            status, answer = post(url, token, payload)
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        print(redact(f"post_review: cannot reach {url}: {reason}", token), file=sys.stderr)
        return 1
    if status not in (200, 201):
        print(
            redact(f"post_review: GitHub answered {status}: {api_message(answer)}", token),
            file=sys.stderr,
        )
        return 1
    where = answer.get("html_url") if isinstance(answer, dict) else None
    print(f"post_review: posted review to pull request #{number}" + (f": {where}" if where else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
