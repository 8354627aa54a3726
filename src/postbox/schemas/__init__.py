"""Event schemas: the repository of `.avsc` files, their fingerprints and their compatibility."""

from postbox.schemas.compat import CompatibilityReport, check_folder, check_pair
from postbox.schemas.fingerprint import canonical_form, fingerprint
from postbox.schemas.repository import EventSchema, SchemaRepository, scan

__all__ = [
    "CompatibilityReport",
    "EventSchema",
    "SchemaRepository",
    "canonical_form",
    "check_folder",
    "check_pair",
    "fingerprint",
    "scan",
]
