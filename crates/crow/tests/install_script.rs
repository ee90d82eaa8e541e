//! scripts/install.sh against a local release server: it installs an archive whose SHA-256
//! matches the release's SHA256SUMS, and refuses (non-zero, nothing installed) a tampered one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};

use axum::http::{StatusCode, Uri};
use axum::response::IntoResponse;
use tokio::process::Command;

const TARGET: &str = "x86_64-unknown-linux-gnu";

/// A release server: serves `files` (URL path → bytes) and records every path asked for.
struct Releases {
    url: String,
    asked: Arc<Mutex<Vec<String>>>,
}

async fn releases(files: HashMap<String, Vec<u8>>) -> Releases {
    let asked: Arc<Mutex<Vec<String>>> = Arc::default();
    let kept = Arc::clone(&asked);
    let files = Arc::new(files);
    let app = axum::Router::new().fallback(move |uri: Uri| {
        let kept = Arc::clone(&kept);
        let files = Arc::clone(&files);
        async move {
            kept.lock().unwrap().push(uri.path().to_owned());
            match files.get(uri.path()) {
                Some(bytes) => (StatusCode::OK, bytes.clone()).into_response(),
                None => StatusCode::NOT_FOUND.into_response(),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Releases { url, asked }
}

/// A release archive as release.yml makes it: crow-<target>/{crow,crow-sandbox}.
fn archive(work: &Path, crow_text: &str) -> Vec<u8> {
    let dir = work.join(format!("crow-{TARGET}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("crow"), crow_text).unwrap();
    std::fs::write(dir.join("crow-sandbox"), "#!/bin/sh\necho sandbox\n").unwrap();
    let tarball = work.join("out.tar.gz");
    let status = std::process::Command::new("tar")
        .arg("-C")
        .arg(work)
        .arg("-czf")
        .arg(&tarball)
        .arg(format!("crow-{TARGET}"))
        .status()
        .unwrap();
    assert!(status.success());
    let bytes = std::fs::read(&tarball).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&tarball).unwrap();
    bytes
}

fn sha256(work: &Path, bytes: &[u8]) -> String {
    let file = work.join("hash-me");
    std::fs::write(&file, bytes).unwrap();
    let out = std::process::Command::new("sha256sum")
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install.sh")
}

async fn install(server: &Releases, home: &Path, dest: &Path, version: Option<&str>) -> Output {
    let mut cmd = Command::new("sh");
    cmd.arg(script())
        .args(version)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("NO_PROXY", "*")
        .env("no_proxy", "*")
        .env("CROW_RELEASE_URL", format!("{}/releases", server.url))
        .env("CROW_INSTALL_DIR", dest)
        .env("CROW_TARGET", TARGET)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(std::time::Duration::from_secs(60), cmd.output())
        .await
        .expect("install.sh hung")
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test]
async fn installs_a_release_whose_checksum_matches() {
    let work = tempfile::tempdir().unwrap();
    let good = archive(work.path(), "#!/bin/sh\necho crow 9.9.9\n");
    let sums = format!(
        "{}  crow-aarch64-apple-darwin.tar.gz\n{}  crow-{TARGET}.tar.gz\n",
        "0".repeat(64),
        sha256(work.path(), &good)
    );
    let prefix = "/releases/download/v9.9.9";
    let server = releases(HashMap::from([
        (format!("{prefix}/crow-{TARGET}.tar.gz"), good),
        (format!("{prefix}/SHA256SUMS"), sums.into_bytes()),
    ]))
    .await;
    let dest = work.path().join("bin");
    let out = install(&server, work.path(), &dest, Some("v9.9.9")).await;
    assert!(out.status.success(), "{}", text(&out));

    let crow = dest.join("crow");
    assert_eq!(
        std::fs::read_to_string(&crow).unwrap(),
        "#!/bin/sh\necho crow 9.9.9\n"
    );
    assert!(dest.join("crow-sandbox").is_file());
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&crow).unwrap().permissions().mode() & 0o777,
        0o755
    );
    let ran = std::process::Command::new(&crow).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "crow 9.9.9\n");
    let asked = server.asked.lock().unwrap().clone();
    assert_eq!(
        asked,
        [
            format!("{prefix}/crow-{TARGET}.tar.gz"),
            format!("{prefix}/SHA256SUMS")
        ]
    );
}

#[tokio::test]
async fn refuses_a_tampered_archive_and_installs_nothing() {
    let work = tempfile::tempdir().unwrap();
    let good = archive(work.path(), "#!/bin/sh\necho crow\n");
    let tampered = archive(work.path(), "#!/bin/sh\necho pwned\n");
    assert_ne!(good, tampered);
    // SHA256SUMS names the genuine archive; the server hands out another (the default:
    // the latest release).
    let sums = format!("{}  crow-{TARGET}.tar.gz\n", sha256(work.path(), &good));
    let prefix = "/releases/latest/download";
    let server = releases(HashMap::from([
        (format!("{prefix}/crow-{TARGET}.tar.gz"), tampered),
        (format!("{prefix}/SHA256SUMS"), sums.into_bytes()),
    ]))
    .await;
    let dest = work.path().join("bin");
    let out = install(&server, work.path(), &dest, None).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("checksum mismatch"),
        "{}",
        text(&out)
    );
    assert!(!dest.join("crow").exists(), "a tampered crow was installed");
    assert!(!dest.join("crow-sandbox").exists());
}

#[tokio::test]
async fn a_missing_release_exits_2() {
    let work = tempfile::tempdir().unwrap();
    let server = releases(HashMap::new()).await;
    let dest = work.path().join("bin");
    let out = install(&server, work.path(), &dest, Some("v0.0.0")).await;
    // 2 lets the action fall back to building from source (3, a mismatch, never does).
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(!dest.join("crow").exists());
}
