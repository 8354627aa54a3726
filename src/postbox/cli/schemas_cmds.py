"""`postbox schemas`: check compatibility of every event's versions; list schemas and fingerprints;
write the payload classes typed handlers read (`codegen`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from postbox.cli.output import JsonAliasOpt, Listing, OutputFormat, OutputOpt, console, output_format, print_json, print_listing
from postbox.topics import topic_for

schemas_app = typer.Typer(help="Avro event schemas: compatibility check, listing, payload classes.", no_args_is_help=True)

DirOption = typer.Option(None, "--dir", help="event schemas folder (default: POSTBOX_SCHEMAS_DIR, else ./schemas)")


def _folder(directory: Optional[Path]) -> Path:
    from postbox.resources import schemas_dir

    return schemas_dir(directory)


@schemas_app.command("check")
def check(
    directory: Optional[Path] = DirOption,
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> int:
    """Every schema parses; each version reads the previous one's data and the other way round."""
    from postbox.schemas.compat import check_folder

    report = check_folder(_folder(directory))
    if as_json:
        print_json(report.as_dict())
    else:
        for pair in report.pairs:
            mark = "[green]ok[/]" if pair.ok else "[red]INCOMPATIBLE[/]"
            console.print(f"{pair.event} v{pair.older} ↔ v{pair.newer}: {mark}", highlight=False)
        for line in report.problems:
            console.print(f"[red]✗[/] {line}", highlight=False, markup=True)
        verdict = "[green]all compatible[/]" if report.ok else f"[red]{len(report.problems)} problem(s)[/]"
        console.print(f"{len(report.schemas)} schema(s) in {report.directory}: {verdict}", highlight=False)
    if not report.ok:
        raise typer.Exit(1)
    return 0


@schemas_app.command("list")
def list_schemas(
    directory: Optional[Path] = DirOption,
    output: Optional[OutputFormat] = OutputOpt,
    as_json: bool = JsonAliasOpt,
) -> int:
    """Every event schema with its version and CRC-64-AVRO fingerprint (whole when piped: TSV)."""
    from postbox.schemas.repository import SchemaRepository

    folder = _folder(directory)
    repo = SchemaRepository.load(folder)
    rows = [
        {
            "aggregate_type": s.aggregate_type,
            "event_type": s.event_type,
            "version": s.version,
            "latest": s is repo.get(s.aggregate_type, s.event_type),
            "fingerprint": s.fingerprint_hex,
            "topic": topic_for(s.aggregate_type),
            "fields": s.field_names,
            "path": str(s.path),
        }
        for s in repo
    ]
    fmt = output_format(output, as_json)
    if fmt is OutputFormat.json:
        print_json(rows)
        return 0
    listing = Listing(f"event schemas in {folder}", ["aggregate", "event type", "version", "fingerprint", "fields"])
    for r in rows:
        version = f"v{r['version']}" + (" (latest)" if r["latest"] else "")
        listing.add(r["aggregate_type"], r["event_type"], version, r["fingerprint"], ", ".join(r["fields"]))
    print_listing(listing, fmt)
    return 0


@schemas_app.command("codegen")
def codegen(
    directory: Optional[Path] = DirOption,
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="the module to write (default: print it)"),
    check: bool = typer.Option(False, "--check", help="write nothing; exit 1 when --out differs from what the schemas give (for CI)"),
) -> int:
    """One Python module of dataclasses, one per event type (latest version), for Event[...] handlers."""
    from postbox.payloads.codegen import generate
    from postbox.schemas.repository import SchemaRepository

    folder = _folder(directory)
    text = generate(SchemaRepository.load(folder), source=f"{folder.name}/")
    if out is None:
        if check:
            raise typer.BadParameter("--check compares with a file: give it with --out", param_hint="--check")
        typer.echo(text, nl=False)
        return 0
    current = out.read_text(encoding="utf-8") if out.exists() else None
    if check:
        if current != text:
            console.print(f"[red]✗[/] {out} is stale: it does not match {folder}; run `postbox schemas codegen --out {out}`", highlight=False)
            raise typer.Exit(1)
        console.print(f"{out} matches {folder}", highlight=False)
        return 0
    if current != text:
        out.write_text(text, encoding="utf-8")
    console.print(f"{out}: payload classes of {folder} ({'written' if current != text else 'unchanged'})", highlight=False)
    return 0


def register(app: typer.Typer) -> None:
    app.add_typer(schemas_app, name="schemas")
