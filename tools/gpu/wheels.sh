#!/usr/bin/env bash
# `make gpu-wheels`: what a device call needs to rehearse on a GPU machine without network, under .whl/ (which
# git ignores: add `/.whl/` to .git/info/exclude):
#   .whl/p0 ... .whl/pN   one piece each (at most 57 MiB: a device call carries 64 MiB with the repository)
#                         of one tar of the wheels of tools/gpu/wheels.txt, pruned (tools/gpu/prune.py)
#   .whl/kit              the stack's RayService spec rendered here (the GPU machine has no botocore facts),
#                         botocore's facts as cached here (make verify and the bench read them there),
#                         the tar's sha256 and the number of pieces
# Then tools/gpu/device.sh runs there (see its header). STACK picks the specs (default dev,baseline); an entry
# `dev@selectivePd=1500` renders the stack with that key set over its file's value (rehearsal/prepare.py kit_specs).
# KIT_ONLY=1 writes the kit alone (no download): `make test` runs it so (tests/harness/tools/test_gpu_kit.py).
# WHL_DIR: where all of it goes (default .whl, the folder device.sh reads).
set -euo pipefail
cd "$(dirname "$0")/../.."
stack="${STACK:-dev,baseline}"
piece="${PIECE:-57M}"
python="${PYTHON:-.venv/bin/python}"
whl="${WHL_DIR:-.whl}"
if [ "${KIT_ONLY:-}" != 1 ]; then
  work="$whl/.download"
  mkdir -p "$work"
  # Exactly the pinned wheels for CPython 3.12 on x86-64 Linux (manylinux tags as each project publishes them).
  platforms=()
  for tag in manylinux1_x86_64 manylinux2010_x86_64 manylinux2014_x86_64 \
    manylinux_2_5_x86_64 manylinux_2_17_x86_64 manylinux_2_24_x86_64 manylinux_2_26_x86_64 manylinux_2_27_x86_64 \
    manylinux_2_28_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64 manylinux_2_35_x86_64; do
    platforms+=(--platform "$tag")
  done
  "$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp "${platforms[@]}" -d "$work" -r tools/gpu/wheels.txt
  count=$(ls "$work"/*.whl | wc -l)
  want=$(grep -cE '^[a-z0-9]' tools/gpu/wheels.txt)
  [ "$count" -eq "$want" ] || { echo "downloaded $count wheels, tools/gpu/wheels.txt pins $want: remove stale ones from $work" >&2; exit 1; }
  # Pruned copies: the downloads stay as PyPI serves them, so the next run downloads nothing.
  rm -rf "$whl/.pruned" && mkdir -p "$whl/.pruned" && cp "$work"/*.whl "$whl/.pruned/"
  "$python" tools/gpu/prune.py "$whl"/.pruned/*.whl
  rm -rf "$whl"/p[0-9]* "$whl/kit" && mkdir -p "$whl/kit"
  (cd "$whl/.pruned" && tar -cf ../wheels.tar ./*.whl)
  sha256sum "$whl/wheels.tar" | cut -d' ' -f1 > "$whl/kit/wheels.sha256"
  split -b "$piece" -d -a 1 "$whl/wheels.tar" "$whl/wheels.tar.part"
  n=0
  for part in "$whl"/wheels.tar.part*; do
    mkdir -p "$whl/p$n" && mv "$part" "$whl/p$n/wheels.tar.part$n"
    n=$((n + 1))
  done
  echo "$n" > "$whl/kit/pieces"
  rm -f "$whl/wheels.tar"
  echo "$count wheels, $(du -sh "$whl/.pruned" | cut -f1) pruned, in $n pieces: $(du -sh "$whl"/p* | awk '{print $2 " " $1}' | tr '\n' ' ')"
fi
"$python" -m rehearsal.kit "$stack" "$whl/kit" >/dev/null
echo "kit: $(ls "$whl/kit" | tr '\n' ' ')(RayService specs of $stack, rendered here)"
