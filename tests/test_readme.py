"""The README's Python example runs as written and says what it claims."""

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_building_blocks_example_runs():
    text = README.read_text(encoding="utf-8")
    code = re.search(r"## Building blocks from Python\n\n```python\n(.*?)```", text, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)
    assert namespace["model"].layers[2].count_params() == 8_544
    assert tuple(namespace["weights"].shape) == (1, 5, 5)
    assert float(namespace["weights"][0, 0, 3]) == 0.0
    assert tuple(namespace["cross_scores"].shape) == (1, 2, 3, 5)
    assert tuple(namespace["step"].shape) == (1, 1, 8)


def test_readme_gives_exactly_two_setup_commands():
    text = README.read_text(encoding="utf-8")
    setup = re.search(r"## Set up\n(.*?)\n## ", text, re.S).group(1)
    commands = re.search(r"```bash\n(.*?)```", setup, re.S).group(1).strip().splitlines()
    assert [line.split("#")[0].strip() for line in commands] == ["make demo", "make test"]
