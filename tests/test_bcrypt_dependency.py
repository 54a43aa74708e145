"""bcrypt is a plain dependency: the web config's hashes are checked without the ``crypt`` module (gone in Python 3.13)."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from fioscope_testkit.paths import REPO

CHECK = """
import base64, sys
sys.modules["crypt"] = None  # as on Python >= 3.13: importing it fails
import bcrypt
from fioscope.webconfig import load_web_config
hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$")  # htpasswd's prefix
path = sys.argv[1]
open(path, "w").write(f"basic_auth_users:\\n  prometheus: '{hashed}'\\n")
config = load_web_config(path)
def header(password): return "Basic " + base64.b64encode(f"prometheus:{password}".encode()).decode()
print(config.authorized(header("s3cret")), config.authorized(header("wrong")), config.authorized(header("s3cret" + "x" * 80)))
"""


def test_web_config_hashes_are_checked_without_the_crypt_module(tmp_path):
    proc = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path / "web.yml")], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False", "False"]


def test_bcrypt_is_required_on_every_python():
    deps = tomllib.loads((REPO / "exporter" / "pyproject.toml").read_text())["project"]["dependencies"]
    [bcrypt] = [d for d in deps if d.startswith("bcrypt")]
    assert ";" not in bcrypt, bcrypt  # no python_version marker
    assert "import crypt" not in (REPO / "exporter" / "fioscope" / "webconfig.py").read_text()
