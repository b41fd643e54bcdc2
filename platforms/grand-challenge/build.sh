#!/usr/bin/env bash
# `make container`: build the grand-challenge evaluation image (platforms/grand-challenge/Dockerfile).
#
#   platforms/grand-challenge/build.sh [TAG]          (default TAG: xbench-eval; BASE=image to choose the base)
#
# Two images from one build: TAG, grand-challenge's evaluation image, and TAG-codabench, the same scorer
# without the entry point and the unprivileged user (the image a Codabench competition names).
# The base is $BASE, else the official python image when it is present or can be pulled, else a Debian base
# made here from Debian's packages (debian-base.sh: for machines that cannot reach Docker Hub). The build
# context holds only what the image needs (the legacy builder reads no per-Dockerfile ignore file), plus the
# host's CA bundle for pip when there is one (networks that intercept TLS); that file stays in the build stage.
# Prints the build time and the image size; exit 2 when there is no Docker daemon.
set -euo pipefail
cd "$(dirname "$0")/../.."
tag=${1:-xbench-eval}
if ! docker info >/dev/null 2>&1; then
    echo "make container: no Docker daemon answers (start dockerd, or install docker.io first)" >&2
    exit 2
fi
base=${BASE:-}
if [ -z "$base" ]; then
    base=python:3.11-slim
    if ! docker image inspect "$base" >/dev/null 2>&1 && ! timeout 60 docker pull -q "$base" >/dev/null 2>&1; then
        echo "make container: $base cannot be pulled; using a Debian base built from Debian's packages" >&2
        base=xbench-base:bookworm
        docker image inspect "$base" >/dev/null 2>&1 || platforms/grand-challenge/debian-base.sh "$base" >/dev/null
    fi
fi
ctx=$(mktemp -d "${TMPDIR:-/tmp}/xbench-eval-context.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
files=(pyproject.toml README.md xbench schemas score extract suites
       platforms/grand-challenge/Dockerfile platforms/grand-challenge/evaluate.py)
[ -f platforms/grand-challenge/gt.zarr.zip ] && files+=(platforms/grand-challenge/gt.zarr.zip)
tar -c --exclude=__pycache__ --exclude='*.pyc' "${files[@]}" | tar -C "$ctx" -x
ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
[ -f "$ca" ] && cp "$ca" "$ctx/platforms/grand-challenge/pip-ca.crt"
start=$(date +%s)
docker build --network host --build-arg BASE="$base" -f "$ctx/platforms/grand-challenge/Dockerfile" -t "$tag" "$ctx"
# the Codabench image is a stage of the same build: every layer comes from the cache
docker build -q --network host --build-arg BASE="$base" -f "$ctx/platforms/grand-challenge/Dockerfile" \
    --target codabench -t "$tag-codabench" "$ctx" >/dev/null
seconds=$(( $(date +%s) - start ))
bytes=$(docker image inspect -f '{{.Size}}' "$tag")
echo "built $tag and $tag-codabench from $base in ${seconds} s: $(( bytes / 1000000 )) MB"
