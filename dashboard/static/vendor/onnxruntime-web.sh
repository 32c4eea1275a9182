#!/bin/sh
# Vendor onnxruntime-web (pinned) from npm: the WebAssembly build only, unchanged, checked
# against SHA256SUMS. `make onnxruntime-web`; needs npm and the npm registry.
set -eu
VERSION=1.31.1
HERE=$(cd "$(dirname "$0")" && pwd)/onnxruntime-web
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
(cd "$WORK" && npm pack --silent "onnxruntime-web@$VERSION" >/dev/null && tar xzf "onnxruntime-web-$VERSION.tgz")
for name in ort.wasm.bundle.min.mjs ort-wasm-simd-threaded.wasm; do
  cp "$WORK/package/dist/$name" "$HERE/$name"
done
(cd "$HERE" && sha256sum -c SHA256SUMS)
