#!/usr/bin/env bash
# The installed forms of spyre-sim, used from a folder outside the repository:
#  1. `cmake --install` into a temporary prefix; a small C++ program built with
#     find_package(SpyreSim) runs an MLP on spyre; the installed CLI runs.
#  2. The wheel (pip wheel, scikit-build-core, reusing the build tree) installed into a
#     fresh venv that sees Debian's torch; `import torch` alone (the torch.backends entry
#     point) gives torch.device("spyre"); a model runs; torch.compile finds the backend;
#     the wheel's spyre-sim CLI runs.
# Usage: test_install.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d /tmp/spyre-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# Nothing from the repository on the import path.
unset PYTHONPATH SPYRE_BUILD_DIR SPYRE_SIM_CONFIG SPYRE_SIM_SET SPYRE_SIM_DEVICES
export SPYRE_SIM_SET="cores.count=4"  # a small chip: quick runs

echo "== cmake --install into $tmp/prefix"
cmake --install "$build" --prefix "$tmp/prefix" --component sdk >/dev/null
for f in bin/spyre-sim lib/libspyre_drv.so lib/libspyre_torch.so include/spyre/spyre_drv.h \
         lib/cmake/SpyreSim/SpyreSimConfig.cmake share/spyre-sim/configs/spyre.yaml; do
  [ -e "$tmp/prefix/$f" ] || { echo "missing from the install: $f"; exit 1; }
done
cp -r "$src/tests/install/consumer" "$tmp/consumer"
cmake -S "$tmp/consumer" -B "$tmp/consumer-build" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer-build" >/dev/null
(cd "$tmp" && ./consumer-build/spyre_consumer) | tee "$tmp/consumer.out"
grep -q '^ok ' "$tmp/consumer.out"
(cd "$tmp" && ./prefix/bin/spyre-sim info | head -n 1)

echo "== the wheel"
(cd "$src" && python3 -m pip wheel . --no-build-isolation --no-deps --no-index -q -w "$tmp/dist" -C build-dir="$build")
python3 -m venv --system-site-packages "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --no-deps --no-index "$tmp"/dist/spyre_sim-*.whl
cd "$tmp"
"$tmp/venv/bin/python" - <<'PY'
import torch  # the torch.backends entry point loads spyre_sim
import spyre_sim
assert "/venv/" in spyre_sim.__file__, spyre_sim.__file__
assert torch.device("spyre").type == "spyre" and torch.spyre.is_available()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32))
x = torch.randn(16, 64)
got = model.to("spyre")(x.to("spyre"))
assert got.device.type == "spyre"
torch.testing.assert_close(got.cpu(), model.cpu()(x), rtol=1e-3, atol=1e-3)
assert "spyre" in torch._dynamo.list_backends()
print("ok: the wheel's backend from", spyre_sim.library_path())
PY
"$tmp/venv/bin/spyre-sim" info | head -n 1
