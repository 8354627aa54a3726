"""The ``postbox`` console script's entry point: the command line needs the ``[cli]`` extra.

The base install (the writer) and ``[consumer]`` ship the ``postbox`` script too (a wheel's
scripts cannot depend on an extra); without the CLI's libraries it says which extra to install
and exits 2 (a usage error: the command cannot run as installed), instead of a traceback from
deep inside the first import. Nothing here imports the CLI before the check.
"""

from __future__ import annotations

import sys
from importlib.util import find_spec

#: The import names the command line needs, by the distribution that provides them (the [cli]
#: extra brings them all, the consumer runtime's included).
CLI_MODULES: dict[str, str] = {
    "typer": "typer", "rich": "rich", "httpx": "httpx",
    "confluent_kafka": "confluent-kafka", "redis": "redis", "prometheus_client": "prometheus-client",
}  # fmt: skip
INSTALL_CLI = "pip install 'postbox-cdc[cli]'"
EXIT_NOT_INSTALLED = 2


def missing_cli_modules() -> list[str]:
    """The distributions of :data:`CLI_MODULES` that are not importable here."""
    return [dist for module, dist in CLI_MODULES.items() if find_spec(module) is None]


def main() -> None:
    """Run the command line, or say which extra to install and exit 2."""
    missing = missing_cli_modules()
    if missing:
        sys.stderr.write(
            f"error: the postbox command needs the CLI extra, which is not installed (missing: {', '.join(missing)})\n"
            f"  fix: {INSTALL_CLI}\n"
        )
        sys.exit(EXIT_NOT_INSTALLED)
    from postbox.cli import main as cli_main

    cli_main()
