#!/usr/bin/env bash
# CPU rehearsal of issue #5's GPU run (experiments/gpu/README.md) in the device image's environment:
# Python 3.12, torch 2.11, transformers 5.17 and the image's versions of accelerate, huggingface_hub,
# tokenizers, numpy, safetensors and sentence-transformers, without polars, marisa-trie and gguf, so
# that the run installs those from the staged wheels as it must on the device. The staged folders are
# laid out as the device calls leave them: a and b copied into one folder, c beside it.
#
#   experiments/gpu/rehearse_gpu_image.sh [STAGE [RUN OPTIONS...]]
#
# STAGE: gpu_eval.py prepare's --stage (.gpu/eval); RUN OPTIONS are passed to `gpu_eval.py run --smoke`
# (e.g. the next device run's `--samplings coverage --train-budget-s 400 --budget-s 540`).
#
# Environment: PY312 (a Python 3.12 interpreter; default pyenv's 3.12.1), VENV (default
# /tmp/graft-image-py312; made once, ~5 GB with torch's CUDA build from PyPI), REHEARSAL (the
# rehearsal's folder, default /tmp/graft-image-rehearsal; its out/ holds the tables).
set -euo pipefail
cd "$(dirname "$0")/../.."
stage=${1:-.gpu/eval}
shift $(( $# > 0 ? 1 : 0 ))
py312=${PY312:-"$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")/versions/3.12.1/bin/python"}
venv=${VENV:-/tmp/graft-image-py312}
work=${REHEARSAL:-/tmp/graft-image-rehearsal}

for part in a b c; do
    [ -d "$stage/$part" ] || { echo "no $stage/$part: run experiments/gpu/gpu_eval.py prepare first (experiments/gpu/README.md)"; exit 2; }
done
if [ ! -x "$venv/bin/python" ]; then
    [ -x "$py312" ] || { echo "no Python 3.12 at $py312: set PY312"; exit 2; }
    "$py312" -m venv "$venv"
    "$venv/bin/pip" install -q torch==2.11.0 transformers==5.17.0 accelerate==1.15.0 huggingface_hub==1.33.0 \
        tokenizers==0.23.2 numpy==2.5.2 safetensors==0.8.0 sentence-transformers==6.0.1 pyarrow pandas scipy \
        networkx typer rich
fi
for absent in polars marisa_trie gguf; do
    if "$venv/bin/python" -c "import $absent" 2>/dev/null; then
        echo "$venv has $absent, which the device image lacks: use a fresh VENV"; exit 2
    fi
done

rm -rf "$work" && mkdir -p "$work/g"
cp "$stage"/a/* "$stage"/b/* "$work/g/"
HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 "$venv/bin/python" -m experiments.gpu.gpu_eval run --smoke --quiet \
    --stage "$work/g,$stage/c" --site "$work/site" --work "$work/work" --out "$work/out" "$@"
"$venv/bin/python" - "$work/out/gpu_eval.json" <<'EOF'
import json, sys
error = json.load(open(sys.argv[1]))["error"]
print("rehearsal:", "failed" if error else "passed")
sys.exit(1 if error else 0)
EOF
