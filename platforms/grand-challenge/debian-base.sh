#!/usr/bin/env bash
# Build a minimal Debian base image with Python (python3, python3-venv) from Debian's own packages and load
# it into Docker as $1 (default xbench-base:bookworm). `make container` uses it when Docker Hub (and with it
# the official python image) cannot be reached. Needs root, debootstrap and a running Docker daemon.
set -euo pipefail
tag=${1:-xbench-base:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
command -v debootstrap >/dev/null || { echo "debian-base.sh: needs debootstrap (apt-get install debootstrap)" >&2; exit 2; }
root=$(mktemp -d "${TMPDIR:-/tmp}/xbench-base.XXXXXX")
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv bookworm "$root" "$mirror" >&2
# What a base image needs no copy of: package lists, caches, documentation.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
       "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/*
tar --numeric-owner -C "$root" -c . | docker import -c 'CMD ["python3"]' - "$tag" >/dev/null
echo "$tag"
