"""An installed spyre_sim is imported by `import torch` (the torch.backends entry point)."""

import os
import subprocess
import sys


def test_import_torch_loads_spyre_through_the_entry_point():
    code = "import torch, sys; print(hasattr(torch, 'spyre'), 'spyre_sim' in sys.modules, torch.spyre.device_count())"
    env = dict(os.environ)
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "2"]
