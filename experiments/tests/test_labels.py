"""Experiment labels: Kubernetes syntax, set at create, edited in one transaction, filtered on
HTTP and gRPC by kubectl-style selectors, shown in list and get."""
from __future__ import annotations

import re

import pytest
from django.db import connection

from accounts.tests.factories import UserFactory
from core.errors import PermissionDenied, ValidationFailed
from experiments.labels import (
    key_problem, matches, parse_label_args, parse_selector, value_problem,
)
from experiments.models import ExpLabel, Experiment
from experiments.services import exp_create, exp_update_labels
from experiments.tests.factories import make_exp, task_spec


@pytest.mark.parametrize("key", ["team", "example.com/team", "a", "A-b_c.d", "x" * 63,
                                 "a.b-c/x"])
def test_valid_keys(key):
    assert key_problem(key) is None


@pytest.mark.parametrize("key,words", [
    ("", "required"), ("-team", "name"), ("team-", "name"), ("x" * 64, "name"),
    ("Example.com/team", "prefix"), ("/team", "empty prefix"), ("a b", "name"),
    ("example.com/", "name"), ("x" * 254 + "/a", "prefix")])
def test_invalid_keys_name_the_label_and_the_rule(key, words):
    problem = key_problem(key)
    assert problem and words in problem


@pytest.mark.parametrize("value,ok", [("", True), ("true", True), ("v1.2_3-x", True),
                                      ("x" * 63, True), ("x" * 64, False), ("-a", False),
                                      ("a b", False), ("a/b", False)])
def test_values(value, ok):
    assert (value_problem("k", value) is None) == ok


def test_kubectl_label_arguments():
    assert parse_label_args(["a=1", "b=", "c-"]) == ({"a": "1", "b": ""}, ["c"])
    with pytest.raises(ValueError, match="neither"):
        parse_label_args(["a"])
    with pytest.raises(ValueError, match="both set and removed"):
        parse_label_args(["a=1", "a-"])


def test_selectors():
    assert parse_selector("a=1") == parse_selector("a==1")
    assert parse_selector("team").value is None
    assert matches({"a": "1", "team": ""}, [parse_selector("a=1"), parse_selector("team")])
    assert not matches({"a": "1"}, [parse_selector("team")])


@pytest.mark.django_db
def test_create_stores_labels_in_the_row_and_the_table(user):
    exp = exp_create(creator=user, name="e", cluster_name="local", exp_type="profiling",
                     role_to_task_spec={"main": task_spec()},
                     labels={"team": "infra", "baseline": "true"})
    assert Experiment.objects.get(pk=exp.pk).labels == {"baseline": "true", "team": "infra"}
    assert sorted(ExpLabel.objects.filter(experiment=exp).values_list("key", "value")) == [
        ("baseline", "true"), ("team", "infra")]


@pytest.mark.django_db
def test_create_refuses_bad_labels_and_writes_nothing(user):
    with pytest.raises(ValidationFailed) as info:
        exp_create(creator=user, name="e", cluster_name="local", exp_type="profiling",
                   role_to_task_spec={"main": task_spec()}, labels={"Bad Key": "x", "ok": 1})
    problems = " ".join(info.value.errors["labels"])
    assert "'Bad Key'" in problems and "'ok'" in problems and "quote" in problems
    assert not Experiment.objects.exists()


@pytest.mark.django_db
def test_label_edits_are_one_transaction_and_kubectl_like(user):
    exp = make_exp(creator=user)
    exp_update_labels(exp_id=exp.pk, actor=user, set_labels={"a": "1", "b": "2"})
    labels = exp_update_labels(exp_id=exp.pk, actor=user, set_labels={"a": "9", "c": ""},
                               remove=["b", "missing"])
    assert labels == {"a": "9", "c": ""}
    assert Experiment.objects.get(pk=exp.pk).labels == labels
    assert dict(ExpLabel.objects.filter(experiment=exp).values_list("key", "value")) == labels


@pytest.mark.django_db
def test_a_failed_label_edit_changes_nothing(user):
    exp = make_exp(creator=user)
    exp_update_labels(exp_id=exp.pk, actor=user, set_labels={"a": "1"})
    too_many = {f"k{i}": "v" for i in range(64)}
    with pytest.raises(ValidationFailed, match="at most 64"):
        exp_update_labels(exp_id=exp.pk, actor=user, set_labels=too_many)
    assert Experiment.objects.get(pk=exp.pk).labels == {"a": "1"}
    assert ExpLabel.objects.filter(experiment=exp).count() == 1
    with pytest.raises(PermissionDenied):
        exp_update_labels(exp_id=exp.pk, actor=UserFactory(), set_labels={"b": "2"})


@pytest.fixture
def labelled(db):
    owner = UserFactory()
    exps = {}
    for name, labels in {"base": {"baseline": "true", "team": "infra"},
                         "cand": {"baseline": "false", "team": "infra"},
                         "other": {"team": ""}, "none": {}}.items():
        exps[name] = make_exp(creator=owner, name=name)
        if labels:
            exp_update_labels(exp_id=exps[name].pk, actor=owner, set_labels=labels)
    return exps


@pytest.mark.parametrize("query,names", [
    ("label=baseline=true", {"base"}),
    ("label=team", {"base", "cand", "other"}),
    ("label=team=infra&label=baseline=false", {"cand"}),
    ("label=team=infra,baseline", {"base", "cand"}),
    ("label=team=", {"other"}),
    ("label=nothing", set()),
])
@pytest.mark.parametrize("few", [2000, 0], ids=["few-labelled:IN", "many-labelled:count"])
def test_http_list_filters_by_label_selectors(auth_api, labelled, query, names, few,
                                              monkeypatch):
    from experiments.filters import LabelSelectorFilter

    monkeypatch.setattr(LabelSelectorFilter, "FEW_LABELLED", few)
    res = auth_api.get(f"/api/v1/exps?{query}")
    assert res.status_code == 200, res.content
    got = {row["name"]: row["labels"] for row in res.json()["results"]}
    assert set(got) == names
    if "base" in got:
        assert got["base"] == {"baseline": "true", "team": "infra"}


def test_http_list_names_a_bad_selector(auth_api, labelled):
    res = auth_api.get("/api/v1/exps?label=Bad Key=1")
    assert res.status_code == 400
    assert "label" in res.json() and "Bad Key" in str(res.json()["label"])


def test_http_create_get_and_patch_labels(auth_api, user):
    body = {"name": "e", "cluster_name": "local", "exp_type": "profiling",
            "role_to_task_spec": {"main": {"command": "x"}}, "labels": {"baseline": "true"}}
    res = auth_api.post("/api/v1/exps", body, format="json")
    assert res.status_code == 201, res.content
    exp_id = res.json()["id"]
    assert res.json()["labels"] == {"baseline": "true"} and res.json()["cloned_from"] is None
    res = auth_api.patch(f"/api/v1/exps/{exp_id}/labels",
                         {"labels": {"baseline": None, "team": "infra"}}, format="json")
    assert res.status_code == 200 and res.json() == {"labels": {"team": "infra"}}
    assert auth_api.get(f"/api/v1/exps/{exp_id}").json()["labels"] == {"team": "infra"}
    res = auth_api.patch(f"/api/v1/exps/{exp_id}/labels", {"labels": {"-x": "1"}},
                         format="json")
    assert res.status_code == 400 and "-x" in str(res.json()["labels"])
    bad = auth_api.post("/api/v1/exps", {**body, "labels": {"a": "b c"}}, format="json")
    assert bad.status_code == 400 and "labels" in bad.json()


def test_labels_are_case_sensitive_on_every_database(auth_api, user):
    """Kubernetes label keys and values are case-sensitive: `Team` and `team` are two labels
    of one experiment, and a selector matches its own case only (MariaDB's default collation
    ignored case: the create answered 500 on the unique key, and `team=LLAMA` found `llama`)."""
    body = {"name": "e", "cluster_name": "local", "exp_type": "profiling",
            "role_to_task_spec": {"main": {"command": "x"}},
            "labels": {"team": "llama", "Team": "LLAMA"}}
    res = auth_api.post("/api/v1/exps", body, format="json")
    assert res.status_code == 201, res.content
    exp_id = res.json()["id"]
    assert res.json()["labels"] == {"Team": "LLAMA", "team": "llama"}
    assert sorted(ExpLabel.objects.filter(experiment_id=exp_id).values_list("key", "value")) == [
        ("Team", "LLAMA"), ("team", "llama")]
    other = auth_api.post("/api/v1/exps", {**body, "labels": {"team": "LLAMA"}},
                          format="json").json()["id"]

    def listed(selector):
        res = auth_api.get(f"/api/v1/exps?label={selector}")
        assert res.status_code == 200, res.content
        return sorted(row["id"] for row in res.json()["results"])

    assert listed("team=llama") == [exp_id]
    assert listed("team=LLAMA") == [other]
    assert listed("Team=LLAMA") == [exp_id]
    assert listed("Team=llama") == []
    assert listed("TEAM") == []
    res = auth_api.patch(f"/api/v1/exps/{other}/labels", {"labels": {"TEAM": "x"}},
                         format="json")
    assert res.status_code == 200 and res.json() == {"labels": {"TEAM": "x", "team": "LLAMA"}}


def test_http_patch_labels_takes_the_merge_patch_media_type(auth_api):
    # RFC 7396's media type is application/merge-patch+json, what `kubectl patch --type merge`
    # and Kubernetes clients send; a 415 for it broke them (kubernetes/kubernetes#61103).
    import json

    body = {"name": "mp", "cluster_name": "local", "exp_type": "profiling",
            "role_to_task_spec": {"main": {"command": "x"}}, "labels": {"baseline": "true"}}
    created = auth_api.post("/api/v1/exps", body, format="json")
    assert created.status_code == 201, created.content
    url = f"/api/v1/exps/{created.json()['id']}/labels"
    res = auth_api.patch(url, json.dumps({"labels": {"baseline": None, "team": "infra"}}),
                         content_type="application/merge-patch+json")
    assert res.status_code == 200, res.content
    assert res.json() == {"labels": {"team": "infra"}}
    # The same strict reading as application/json: a key given twice is refused.
    twice = auth_api.patch(url, '{"labels": {"a": "1", "a": "2"}}',
                           content_type="application/merge-patch+json; charset=utf-8")
    assert twice.status_code == 400 and twice.json()["code"] == "parse_error"
    other = auth_api.patch(url, "labels: {}", content_type="application/yaml")
    assert other.status_code == 415


def test_label_filter_reads_the_label_index(labelled):
    """The page's plan is tested in test_list_plans.py; here, the rows a label filter keeps."""
    from experiments.filters import ExperimentFilter
    from django.http import QueryDict

    qs = ExperimentFilter.apply(Experiment.objects.all(),
                                ExperimentFilter.validate(QueryDict("label=baseline=true")))
    assert [e.name for e in qs] == ["base"]


@pytest.mark.parametrize("text,says", [
    ("team!=ml", "no !=, !key, in or notin"),
    ("!team", "no !=, !key, in or notin"),
    ("bad key=x", "holds ' '; only letters, digits"),
    ("a" * 70, "is 70 characters long; the limit is 63"),
    ("ok=-x-", "the value '-x-' must start and end with a letter or digit"),
])
def test_a_bad_selector_says_which_rule_it_breaks(text, says):
    from experiments.labels import parse_selector

    with pytest.raises(ValueError, match=re.escape(says)):
        parse_selector(text)


def test_a_label_on_many_experiments_walks_the_list_order(labelled, monkeypatch):
    """A selector held by more than FEW_LABELLED experiments is a correlated count checked
    while the list order's index is walked: the page is never a sort of every match."""
    from django.http import QueryDict

    from core.http import keyset
    from experiments import selectors
    from experiments.filters import ExperimentFilter, LabelSelectorFilter

    monkeypatch.setattr(LabelSelectorFilter, "FEW_LABELLED", 1)
    qs = ExperimentFilter.apply(selectors.exp_list_queryset(),
                                ExperimentFilter.validate(QueryDict("label=team")))
    keys = keyset.keys_for(Experiment, ["-created_at"])
    page = qs.values("id", "created_at").order_by(*keyset.order_by(keys))[:51]
    assert {row["id"] for row in page} == {labelled[n].pk for n in ("base", "cand", "other")}
    sql, params = page.query.sql_with_params()
    assert "COUNT(" in sql.upper() and " IN (SELECT" not in sql.upper()
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            plan = " ".join(str(part) for row in cursor.fetchall() for part in row)
        assert "TEMP B-TREE" not in plan and "exp_created_id_name" in plan, plan


@pytest.mark.parametrize("few", [2000, 0], ids=["few-labelled:IN", "many-labelled:count"])
@pytest.mark.parametrize("query,names", [
    ("label=team=infra,baseline=true", {"base"}),
    ("label=team,baseline", {"base", "cand"}),
    ("label=team,team=infra", {"base", "cand"}),  # key=value is the stricter of the two
    ("label=baseline=true,baseline=false", set()),  # one label holds one value
    ("label=team=infra,baseline=true,nothing", set()),
])
def test_several_selectors_all_hold(auth_api, labelled, query, names, few, monkeypatch):
    from experiments.filters import LabelSelectorFilter

    monkeypatch.setattr(LabelSelectorFilter, "FEW_LABELLED", few)
    res = auth_api.get(f"/api/v1/exps?{query}")
    assert res.status_code == 200, res.content
    assert {row["name"] for row in res.json()["results"]} == names


@pytest.mark.parametrize("few", [2000, 0])
def test_many_selectors_are_one_subquery(labelled, few, monkeypatch):
    """As one IN subquery each, 20 selectors kept MariaDB's optimizer busy for minutes
    choosing among the join orders of 20 semi-joins: the selectors are the join of the one
    that orders the page and one condition on experiment_labels for the others, whatever
    their number."""
    from django.http import QueryDict

    from experiments import selectors
    from experiments.filters import ExperimentFilter, LabelSelectorFilter

    monkeypatch.setattr(LabelSelectorFilter, "FEW_LABELLED", few)
    query = "&".join(f"label=k{i}=v" for i in range(30))
    qs = ExperimentFilter.apply(selectors.exp_list_queryset(),
                                ExperimentFilter.validate(QueryDict(query)))
    sql, _params = qs.query.sql_with_params()
    assert len(re.findall(r"(?:FROM|JOIN) [`\"]experiment_labels[`\"]", sql)) == 2, sql
    assert list(qs) == []


def test_selectors_on_more_keys_than_a_label_set_holds_are_refused(auth_api, labelled):
    res = auth_api.get("/api/v1/exps?" + "&".join(f"label=k{i}" for i in range(65)))
    assert res.status_code == 400 and "at most 64" in res.json()["label"][0]


@pytest.mark.parametrize("text", ["team=infra,batch=1", "a, b==2 ,", " team ", "a=1,a=1",
                                  "x=,y"])
def test_the_cli_splits_a_comma_selector_list_as_the_server_does(text):
    """`falcon exp list -l a=1,b` (experiments.labels.parse_selectors) and `?label=a=1,b`
    (the filter's field) read the same selectors, in the same order (AND)."""
    from experiments.filters import LabelSelectorField
    from experiments.labels import parse_selectors

    assert list(dict.fromkeys(parse_selectors(text))) == LabelSelectorField().to_python(text)


@pytest.mark.parametrize("text", [",", " , ", "a,b!=1", "a=x y"])
def test_a_comma_list_without_a_good_selector_is_refused_by_both(text):
    from django import forms

    from experiments.filters import LabelSelectorField
    from experiments.labels import parse_selectors

    with pytest.raises(ValueError):
        parse_selectors(text)
    with pytest.raises(forms.ValidationError):
        LabelSelectorField().to_python(text)


@pytest.mark.django_db
def test_overwrite_false_refuses_a_changed_value_in_the_transaction():
    from core.errors import Conflict

    exp = make_exp()
    exp_update_labels(exp_id=exp.pk, actor=exp.creator, set_labels={"team": "ml"})
    with pytest.raises(Conflict, match="'team'"):
        exp_update_labels(exp_id=exp.pk, actor=exp.creator, set_labels={"team": "ml2", "b": "1"},
                          overwrite=False)
    assert Experiment.objects.get(pk=exp.pk).labels == {"team": "ml"}
    assert exp_update_labels(exp_id=exp.pk, actor=exp.creator, overwrite=False,
                             set_labels={"team": "ml", "b": "1"}) == {"b": "1", "team": "ml"}
    assert exp_update_labels(exp_id=exp.pk, actor=exp.creator, set_labels={"team": "x"}) == {
        "b": "1", "team": "x"}  # the default (and gRPC's) replaces, as before


def test_http_patch_labels_with_overwrite_false_answers_409_naming_the_key(auth_api):
    body = {"name": "ow", "cluster_name": "local", "exp_type": "profiling",
            "role_to_task_spec": {"main": {"command": "x"}}, "labels": {"team": "ml"}}
    url = f"/api/v1/exps/{auth_api.post('/api/v1/exps', body, format='json').json()['id']}/labels"
    res = auth_api.patch(url + "?overwrite=false", {"labels": {"team": "ml2"}}, format="json")
    assert res.status_code == 409 and "'team'" in str(res.json()), res.content
    res = auth_api.patch(url + "?overwrite=nah", {"labels": {"team": "ml2"}}, format="json")
    assert res.status_code == 400 and "overwrite" in res.json()
    res = auth_api.patch(url + "?overwrite=true", {"labels": {"team": "ml2"}}, format="json")
    assert res.status_code == 200 and res.json() == {"labels": {"team": "ml2"}}


@pytest.mark.parametrize("ordering", ["-created_at", "created_at", "name", "-name", "status"])
def test_a_label_list_pages_in_any_ordering(auth_api, ordering):
    """The label's join orders on the label index's copy of the keys for the list order only;
    any other ordering pages the same rows, in its own order, through every `next` link."""
    owner = UserFactory()
    held = []
    for i, name in enumerate(["d", "a", "e", "b", "c", "f", "g"]):
        exp = make_exp(creator=owner, name=name)
        exp_update_labels(exp_id=exp.pk, actor=owner,
                          set_labels={"team": "infra" if i % 2 == 0 else "ml"})
        if i % 2 == 0:
            held.append(exp)
    key = ordering.lstrip("-")
    expected = sorted(held, key=lambda e: (getattr(Experiment.objects.get(pk=e.pk), key), e.pk),
                      reverse=ordering.startswith("-"))
    url, got, pages = f"/api/v1/exps?label=team=infra&ordering={ordering}&page_size=2", [], []
    while url:
        res = auth_api.get(url)
        assert res.status_code == 200, res.content
        pages.append(res.json())
        got += [row["id"] for row in res.json()["results"]]
        url = res.json()["next"]
    assert got == [e.pk for e in expected]
    # And back through every `previous` link (the cursor's condition walking the other way).
    back = pages[-1]
    for page in reversed(pages[:-1]):
        back = auth_api.get(back["previous"]).json()
        assert [row["id"] for row in back["results"]] == [row["id"] for row in page["results"]]
    assert back["previous"] is None
