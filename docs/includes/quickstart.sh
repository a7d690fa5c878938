python3 -m venv .venv && source .venv/bin/activate && pip install -e '.[dev]'
invoke exp no-cap
invoke test
