"""What `db init`'s admin lacks, by PostgreSQL version, as the grant and the statement that adds it.
The local server is PostgreSQL 15 (the integration tests run these rules against it); 16 changed
them (CREATEROLE acts only with ADMIN OPTION; REPLICATION may create REPLICATION), so its cases are
stated here from the facts a server reports."""

from __future__ import annotations

from dataclasses import replace

import pytest

from postbox.db_admin import ROLES, AdminFacts, missing_grants

MANAGED = AdminFacts(
    version=160004, admin="cloud admin", superuser=False, createrole=True, replication=True, database="shop",
    create_in_database=True, schema_exists=False, existing=frozenset(), admin_of=frozenset(),
    replication_roles=frozenset(), owner_usable=False, maint_in_owner=False, rds_replication=False,
    publication_owner=None, publication_usable=None,
)


def test_a_createrole_replication_admin_on_16_lacks_nothing_on_a_fresh_cluster() -> None:
    assert missing_grants(MANAGED, {"postbox_app": "POSTBOX_APP_PASSWORD"}) == []


def test_on_16_an_admin_without_replication_is_told_the_grant_or_rds_replication() -> None:
    (missing,) = missing_grants(replace(MANAGED, replication=False), {})
    assert missing.what == ("the admin role cloud admin lacks REPLICATION, which PostgreSQL 16 needs to create "
                            "the REPLICATION role postbox_cdc")
    assert missing.fix.startswith('as a superuser: ALTER ROLE "cloud admin" REPLICATION; on RDS/Aurora: GRANT rds_replication TO "cloud admin"')


def test_with_rds_replication_to_grant_postbox_cdc_needs_no_replication_attribute() -> None:
    assert missing_grants(replace(MANAGED, version=150007, replication=False, rds_replication=True), {}) == []


def test_before_16_only_a_superuser_creates_a_replication_role() -> None:
    (missing,) = missing_grants(replace(MANAGED, version=150007), {})
    assert "PostgreSQL 15 lets only a superuser create the REPLICATION role postbox_cdc" in missing.what
    assert "CREATE ROLE postbox_cdc LOGIN REPLICATION" in missing.fix


ROLES_OF_ANOTHER_ADMIN = replace(MANAGED, existing=frozenset(ROLES), replication_roles=frozenset({"postbox_cdc"}), maint_in_owner=True)


def test_on_16_roles_another_admin_created_need_admin_option() -> None:
    """On 16 CREATEROLE alone may not grant postbox_owner nor set a password of a role it did not create."""
    missing = missing_grants(ROLES_OF_ANOTHER_ADMIN, {"postbox_app": "POSTBOX_APP_PASSWORD"})
    assert [m.fix.split(";")[0] for m in missing] == [
        'as a superuser: GRANT postbox_owner TO "cloud admin" WITH INHERIT TRUE, SET TRUE',
        'as a superuser: GRANT postbox_app TO "cloud admin" WITH ADMIN TRUE, INHERIT FALSE, SET FALSE',
    ]
    assert "PostgreSQL 16: that takes ADMIN OPTION on postbox_owner" in missing[0].what


def test_on_15_createrole_is_enough_for_ordinary_roles_but_not_for_the_replication_one() -> None:
    facts = replace(ROLES_OF_ANOTHER_ADMIN, version=150007)
    assert missing_grants(facts, {"postbox_app": "POSTBOX_APP_PASSWORD"}) == []
    (missing,) = missing_grants(facts, {"postbox_cdc": "POSTBOX_CDC_PASSWORD"})
    assert missing.what.startswith("PostgreSQL 15 lets only a superuser change the REPLICATION role postbox_cdc")
    assert "leave POSTBOX_CDC_PASSWORD unset" in missing.fix


@pytest.mark.parametrize("version", [150007, 160004, 170002])
def test_a_publication_of_another_role_names_its_owner(version: int) -> None:
    facts = replace(ROLES_OF_ANOTHER_ADMIN, version=version, owner_usable=True, schema_exists=True,
                    publication_owner="postgres", publication_usable=False)
    (missing,) = missing_grants(facts, {})
    assert missing.fix == 'as a superuser or postgres: ALTER PUBLICATION postbox_outbox OWNER TO "cloud admin"'


def test_a_superuser_lacks_nothing() -> None:
    assert missing_grants(replace(ROLES_OF_ANOTHER_ADMIN, superuser=True, create_in_database=False), {"postbox_cdc": "X"}) == []
