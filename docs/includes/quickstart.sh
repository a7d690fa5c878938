python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/invoke exp --variant no-cap
.venv/bin/invoke test
