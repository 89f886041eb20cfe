#!/usr/bin/env bash
# Checks the Dockerfile's runtime stage without a container engine: debootstraps a minimal Debian
# root of the stage's base release with exactly the stage's packages (the RUNTIME_PACKAGES line of
# the Dockerfile, read from there), copies the binary in, and runs it there as the image's user:
# `outboxctl --version`, and `outboxctl migrate --check` against the local PostgreSQL.
#
#   deploy/check-image.sh [BINARY]    (default: target/release/outboxctl, else target/debug/)
#
# Needs root (debootstrap, chroot) and deb.debian.org; when the packages cannot be fetched it says
# SKIPPED and exits 0. DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test) is the
# database; the check uses a scratch schema there and drops it.
set -euo pipefail
cd "$(dirname "$0")/.."

bin="${1:-}"
if [ -z "$bin" ]; then
  bin=target/release/outboxctl
  [ -x "$bin" ] || bin=target/debug/outboxctl
fi
[ -x "$bin" ] || { echo "check-image: no binary at $bin: build first (cargo build --release)" >&2; exit 2; }
url="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"

# The runtime stage's facts, from the Dockerfile itself.
base=$(awk '/^FROM /{b=$2} END{print b}' Dockerfile)               # debian:bookworm-slim
suite=${base#debian:}; suite=${suite%-slim}                         # bookworm
packages=$(sed -n 's/^ARG RUNTIME_PACKAGES="\(.*\)"$/\1/p' Dockerfile)
user=$(awk '/^USER /{u=$2} END{print u}' Dockerfile)                # 65532:65532
[ -n "$suite" ] && [ -n "$packages" ] && [ -n "$user" ] \
  || { echo "check-image: cannot read FROM/RUNTIME_PACKAGES/USER from the Dockerfile" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "check-image: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 2; }

root=$(mktemp -d /tmp/outboxctl-image.XXXXXX)
chmod 0755 "$root"   # mktemp makes it 0700: the image user must reach /usr
schema="outboxctl_image_check_$$"
cleanup() {
  psql "$url" -q -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true
  rm -rf "$root"
}
trap cleanup EXIT

echo "check-image: debootstrap --variant=minbase $suite with: $packages"
if ! debootstrap --variant=minbase --include="${packages// /,}" "$suite" "$root" \
     http://deb.debian.org/debian > "$root.log" 2>&1; then
  echo "check-image: SKIPPED: debootstrap could not build the root (no access to deb.debian.org?):"
  tail -n 3 "$root.log"
  rm -f "$root.log"
  exit 0
fi
rm -f "$root.log"

install -m 0755 "$bin" "$root/usr/local/bin/outboxctl"
missing=$(chroot "$root" ldd /usr/local/bin/outboxctl | grep 'not found' || true)
[ -z "$missing" ] || { echo "check-image: FAIL: libraries missing in the runtime stage:"; echo "$missing"; exit 1; }
[ -s "$root/etc/ssl/certs/ca-certificates.crt" ] || { echo "check-image: FAIL: no CA certificates in the runtime stage"; exit 1; }

run() { chroot --userspec="$user" "$root" env -i PATH=/usr/local/bin:/usr/bin:/bin /usr/local/bin/outboxctl "$@"; }

version=$(run --version)
echo "check-image: in the root as $user: $version"
case "$version" in outboxctl\ *) ;; *) echo "check-image: FAIL: --version printed '$version'"; exit 1 ;; esac

# migrate --check: 'pending' on a new schema (exit 6, its documented answer), then 'up to date'
# (exit 0) after the host's binary migrated it: the image reaches PostgreSQL and reads the schema.
set +e
run --database-url "$url" --schema "$schema" migrate --check > "$root/check.out" 2>&1
first=$?
set -e
[ "$first" -eq 6 ] || { echo "check-image: FAIL: migrate --check on a new schema: exit $first, not 6:"; cat "$root/check.out"; exit 1; }
"$bin" --database-url "$url" --schema "$schema" -q migrate
run --database-url "$url" --schema "$schema" migrate --check
echo "check-image: OK (migrate --check before migrate: exit $first; after: exit 0)"
