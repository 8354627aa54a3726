"""Fill the stack's configuration templates (`infra/local/*`) with this stack's paths and ports.

Templates use ``${name}`` placeholders (string.Template), so a user can read the real
configuration in the repository and see exactly what `postbox up` changes.
"""

from __future__ import annotations

from pathlib import Path
from string import Template
from typing import Mapping

from postbox.errors import StackError
from postbox.stack.checkout import infra_dir


def render(template_name: str, values: Mapping[str, object]) -> str:
    path = infra_dir() / "local" / template_name
    try:
        return Template(path.read_text()).substitute({k: str(v) for k, v in values.items()})
    except KeyError as exc:
        raise StackError(f"{path}: placeholder ${{{exc.args[0]}}} has no value") from None
    except ValueError as exc:  # a lone "$": must be written "$$" in a template
        raise StackError(f"{path}: {exc} (write a literal $ as $$)") from None
    except FileNotFoundError:
        raise StackError(f"{path} is missing from the checkout") from None


def write_if_changed(target: Path, content: str) -> bool:
    """Write `content` unless the file already holds it; True when the file changed."""
    if target.is_file() and target.read_text() == content:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    return True
