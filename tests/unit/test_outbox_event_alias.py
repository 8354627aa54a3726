"""The renamed emit class keeps its old import path for a release (CHANGELOG: Event → NewEvent)."""

import pytest

from postbox.outbox import NewEvent


def test_old_name_still_imports_with_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match="NewEvent"):
        from postbox.outbox import Event  # noqa: F401 - the import is what is tested
    assert Event is NewEvent


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    import postbox.outbox as outbox

    with pytest.raises(AttributeError, match="no attribute 'Evnet'"):
        outbox.Evnet  # noqa: B018 - the attribute access is what is tested
