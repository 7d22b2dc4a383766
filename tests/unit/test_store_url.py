"""How a PostgreSQL `store.url` is named in messages: every host with its port (a multi-host
URL for a standby names both), never the password."""

from __future__ import annotations

from fredica.store.postgres import describe_url


def test_a_multi_host_url_names_each_host_with_its_port_and_no_password() -> None:
    url = "postgresql://fredica:s3cret@10.0.0.1:5432,10.0.0.2:5433/jobs?target_session_attrs=read-write"
    assert describe_url(url) == "fredica@10.0.0.1:5432,10.0.0.2:5433/jobs"


def test_a_host_without_a_port_has_the_default_one() -> None:
    assert describe_url("postgresql://u@a,b:6000/db") == "u@a:5432,b:6000/db"
    assert describe_url("postgresql://u@/db?host=a,b&port=6000") == "u@a:6000,b:6000/db"
    assert describe_url("postgresql://u@a,b/db") == "u@a:5432,b:5432/db"
    assert describe_url("postgresql://u:pw@h:1/db") == "u@h:1/db"
    assert "pw" not in describe_url("postgresql://u:pw@h:1/db")
