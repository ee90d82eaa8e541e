#!/bin/sh
# Installs crow and crow-sandbox from a GitHub release, after checking the archive's SHA-256
# against the release's SHA256SUMS.
#
#   curl -fsSL https://raw.githubusercontent.com/crow-agent/crow/main/scripts/install.sh | sh
#   sh install.sh [VERSION]          # a tag such as v0.2.0; default: the latest release
#
# Environment: CROW_VERSION (instead of the argument), CROW_INSTALL_DIR (default
# ~/.local/bin), CROW_REPO (default crow-agent/crow), CROW_RELEASE_URL (default
# https://github.com/$CROW_REPO/releases), CROW_TARGET (instead of detecting it, e.g.
# x86_64-unknown-linux-gnu).
# Exit codes: 0 installed; 1 error; 2 download failed (no such release, or no archive for this
# target); 3 checksum mismatch or missing (nothing is installed).
set -eu

die() { code=$1; shift; echo "install.sh: $*" >&2; exit "$code"; }

version=${1:-${CROW_VERSION:-latest}}
repo=${CROW_REPO:-crow-agent/crow}
base=${CROW_RELEASE_URL:-https://github.com/$repo/releases}
dest=${CROW_INSTALL_DIR:-$HOME/.local/bin}

if [ -n "${CROW_TARGET:-}" ]; then
  target=$CROW_TARGET
else
  case "$(uname -s)" in
    Linux) os=unknown-linux-gnu ;;
    Darwin) os=apple-darwin ;;
    *) die 1 "no release build for $(uname -s); build from source: cargo install --locked --git https://github.com/$repo crow" ;;
  esac
  case "$(uname -m)" in
    x86_64 | amd64) arch=x86_64 ;;
    aarch64 | arm64) arch=aarch64 ;;
    *) die 1 "no release build for $(uname -m); build from source: cargo install --locked --git https://github.com/$repo crow" ;;
  esac
  target=$arch-$os
fi

case "$version" in
  latest) url=$base/latest/download ;;
  v*) url=$base/download/$version ;;
  *) url=$base/download/v$version ;;
esac
archive=crow-$target.tar.gz

fetch() { # URL FILE
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 3 -o "$2" "$1"
  elif command -v wget >/dev/null 2>&1; then
    wget -q -O "$2" "$1"
  else
    die 1 "needs curl or wget"
  fi
}

sha256() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d' ' -f1
  elif command -v shasum >/dev/null 2>&1; then
    shasum -a 256 "$1" | cut -d' ' -f1
  else
    die 1 "needs sha256sum or shasum to check the download"
  fi
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

echo "install.sh: downloading $archive ($version)" >&2
fetch "$url/$archive" "$tmp/$archive" || die 2 "cannot download $url/$archive"
fetch "$url/SHA256SUMS" "$tmp/SHA256SUMS" || die 2 "cannot download $url/SHA256SUMS"

expected=$(awk -v f="$archive" '$2 == f || $2 == "*" f { print $1; exit }' "$tmp/SHA256SUMS")
[ -n "$expected" ] || die 3 "SHA256SUMS has no line for $archive; nothing installed"
actual=$(sha256 "$tmp/$archive")
[ "$actual" = "$expected" ] ||
  die 3 "checksum mismatch for $archive (expected $expected, got $actual); nothing installed"

tar -xzf "$tmp/$archive" -C "$tmp"
mkdir -p "$dest"
for bin in crow crow-sandbox; do
  src=$tmp/crow-$target/$bin
  [ -f "$src" ] || die 1 "$archive lacks crow-$target/$bin"
  cp "$src" "$dest/.$bin.tmp"
  chmod 755 "$dest/.$bin.tmp"
  mv -f "$dest/.$bin.tmp" "$dest/$bin"
done
echo "install.sh: installed crow and crow-sandbox ($target, $version) in $dest" >&2
case ":$PATH:" in
  *":$dest:"*) ;;
  *) echo "install.sh: $dest is not on your PATH; add it: export PATH=\"$dest:\$PATH\"" >&2 ;;
esac
