"""The FilterSets (`core.http.filters`): one definition per entity, validated once, applied anywhere."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
from django import forms
from django.http import QueryDict

from artifacts.filters import ArtifactFilter
from artifacts.selectors import artifact_list
from core.errors import ValidationFailed
from core.http.filters import MAX_FILTER_VALUES, IdListField, MultiValueField
from core.grpc.from_proto import LIST_FILTER_NAMES
from core.domain.statuses import ArtifactStatus, ExpStatus, JobStatus
from experiments.filters import ExperimentFilter
from experiments.selectors import exp_list
from experiments.services import exp_update_status
from experiments.tests.factories import make_exp
from jobs.filters import JobFilter
from jobs.selectors import job_list
from jobs.services import job_update_status


@pytest.mark.parametrize("query", [
    "status=Running&status=Created",
    "status=Running,Created",
    "status=Running,&status=Created,Running",
    "status= Running , Created",
])
def test_repeated_values_and_comma_lists_are_the_same(query):
    assert ExperimentFilter.validate(QueryDict(query)) == {"status": ["Running", "Created"]}


def test_validate_returns_typed_values_and_refuses_empty_ones():
    values = ExperimentFilter.validate(QueryDict(
        "id=3,5&id=3&cluster_name=c1&updated_since=2024-05-01T12:00:00Z&search=x"))
    assert values == {"id": [3, 5], "cluster_name": ["c1"], "search": "x",
                      "updated_since": datetime(2024, 5, 1, 12, tzinfo=timezone.utc)}
    # A dict of lists (what gRPC maps its request onto) gives the same values.
    assert JobFilter.validate({"id": [3, 5], "exp_status": ["Created"], "cluster_name": "c1"}) \
        == {"id": [3, 5], "exp_status": ["Created"], "cluster_name": ["c1"]}
    assert ExperimentFilter.validate(QueryDict("")) == {}
    assert ExperimentFilter.validate(QueryDict("page_size=3&ordering=name")) == {}
    # An empty list value is refused, never read as "no filter" (it listed everything).
    with pytest.raises(ValidationFailed) as info:
        ExperimentFilter.validate(QueryDict("exp_type=&cluster_name=c1"))
    assert list(info.value.errors) == ["exp_type"]


def test_invalid_values_raise_one_validation_failed_naming_each_filter():
    with pytest.raises(ValidationFailed) as info:
        JobFilter.validate({"status": ["Running", "Created"], "exp_status": ["Pending"],
                            "id": [0, "x", 4], "updated_since": "soon"})
    errors = info.value.errors
    assert set(errors) == {"status", "exp_status", "id", "updated_since"}
    assert errors["status"] == [f"must be one of {', '.join(JobStatus)}; got 'Created'."]
    assert errors["exp_status"] == [f"must be one of {', '.join(ExpStatus)}; got 'Pending'."]
    assert errors["id"] == ["must be integer ids from 1 to 9223372036854775807; got '0', 'x'."]
    assert "ISO 8601" in errors["updated_since"][0]
    with pytest.raises(ValidationFailed) as info:
        ArtifactFilter.validate({"status": ["Running"]})
    assert ", ".join(ArtifactStatus) in info.value.errors["status"][0]


def test_apply_refuses_a_name_the_filterset_does_not_declare():
    with pytest.raises(ValueError, match="exp_id"):
        ExperimentFilter.apply(ExperimentFilter._meta.model.objects.all(), {"exp_id": [1]})


def test_every_commonlistreq_filter_maps_onto_the_job_and_artifact_filters():
    # `labels` (label selectors) is ListExps' alone: jobs and artifacts carry no labels, and
    # ListJobs/ListArtifacts answer INVALID_ARGUMENT when it is set.
    for filterset in (JobFilter, ArtifactFilter):
        assert set(LIST_FILTER_NAMES.values()) - {"label"} <= set(filterset.filter_names()), \
            filterset
        assert "label" not in filterset.filter_names()
    for name in ("status", "exp_type", "cluster_name", "id", "updated_since", "label"):
        assert name in ExperimentFilter.filter_names()


@pytest.mark.django_db
def test_selectors_apply_the_validated_values():
    a = make_exp(name="llama-a", cluster_name="c1", exp_type="profiling", roles=("x", "y"))
    b = make_exp(name="resnet-b", cluster_name="c2", exp_type="benchmark")
    exp_update_status(exp_id=b.pk, status=ExpStatus.RUNNING)
    job_update_status(job_id=a.jobs.get(role="y").pk, status=JobStatus.RUNNING)

    def ids(qs):
        return sorted(qs.values_list("pk", flat=True))

    assert ids(exp_list(filters=ExperimentFilter.validate(QueryDict("search=LLAMA")))) == [a.pk]
    assert ids(exp_list(filters=ExperimentFilter.validate(
        QueryDict("status=Running,Created&exp_type=benchmark")))) == [b.pk]
    assert ids(exp_list()) == sorted([a.pk, b.pk])
    jobs = job_list(filters=JobFilter.validate({"exp_status": ["Created"], "status": ["Pending"]}))
    assert [job.role for job in jobs] == ["x"]
    assert [job.role for job in job_list(filters=JobFilter.validate({"search": "llama y"}))] \
        == ["y"]
    arts = artifact_list(filters=ArtifactFilter.validate({"cluster_name": "c2,c9",
                                                          "exp_type": ["benchmark"]}))
    assert [art.experiment_id for art in arts] == [b.pk]
    assert [art.experiment_id for art in artifact_list(
        filters=ArtifactFilter.validate({"exp_id": [a.pk], "artifact_type": ["profiling"]}))] \
        == [a.pk]


class _Counted:
    """A value that counts the comparisons and hashes made on it (shared `ops` counter)."""

    ops = 0

    def __init__(self, value):
        self.value = value

    def __hash__(self):
        _Counted.ops += 1
        return hash(self.value)

    def __eq__(self, other):
        _Counted.ops += 1
        return isinstance(other, _Counted) and other.value == self.value


class _CountedField(MultiValueField):
    def clean_item(self, item):
        return _Counted(item)


@pytest.mark.parametrize("values", [
    [str(i) for i in range(MAX_FILTER_VALUES)],                    # all distinct
    [str(i % 10) for i in range(MAX_FILTER_VALUES)],               # mostly duplicates
    ",".join(str(i % 500) for i in range(MAX_FILTER_VALUES)),      # one comma list
])
def test_duplicates_are_dropped_in_linear_operations(values):
    # A list scan per value made ~n^2/2 = 500,000 comparisons for 1,000 distinct values; a
    # dict makes one hash per value and one comparison per duplicate found.
    _Counted.ops = 0
    cleaned = _CountedField().clean(values)
    assert _Counted.ops <= 2 * MAX_FILTER_VALUES
    raw = values.split(",") if isinstance(values, str) else values
    assert [item.value for item in cleaned] == list(dict.fromkeys(raw))  # first seen kept


def test_one_value_over_the_limit_is_refused_before_any_is_parsed():
    _Counted.ops = 0
    field = _CountedField()
    field.clean_item = lambda item: pytest.fail("parsed an item of a list over the limit")
    with pytest.raises(forms.ValidationError) as info:
        field.clean([str(i) for i in range(MAX_FILTER_VALUES)] + ["x, , y"])
    assert info.value.messages == [
        f"has {MAX_FILTER_VALUES + 2} values; a filter takes at most {MAX_FILTER_VALUES}. "
        "Split the request, or filter on something broader (status, exp_id, updated_since)."]
    # Blanks are not values: 1,000 values with empty items among them are taken.
    assert len(IdListField().clean(_ids_text(MAX_FILTER_VALUES) + ",,")) == MAX_FILTER_VALUES


def _ids_text(count: int) -> str:
    return ",".join(str(i) for i in range(1, count + 1))


QUERY_PARTS = ["status=Running", "status=Nope", "id=3,5", "id=x", "cluster_name=c1",
               "updated_since=2024-05-01T12:00:00Z", "updated_since=yesterday", "search=ll",
               "creator=bob@example.com", "label=team=x", "label=bad key", "exp_type=t",
               "unknown=1"]


@pytest.mark.parametrize("filterset", [ExperimentFilter, JobFilter, ArtifactFilter])
@pytest.mark.parametrize("count", [1, 2, 4])
def test_validate_cleans_as_the_whole_form_does(filterset, count):
    """`validate` cleans only the filters a request sets (a smaller form): the values and the
    errors are those of django-filter's whole form, for any mix of given filters."""
    import itertools

    filters, form_class, prefix = filterset._prepared()
    for parts in itertools.combinations(QUERY_PARTS, count):
        data = QueryDict("&".join(parts))
        if not any(name in data for name in filters):
            continue
        whole = form_class(data, prefix=prefix)
        try:
            got = filterset.validate(data)
        except ValidationFailed as exc:
            assert not whole.is_valid()
            assert exc.errors == {name: [e["message"] for e in errors]
                                  for name, errors in whole.errors.get_json_data().items()}
        else:
            assert whole.is_valid(), whole.errors
            assert got == {name: value for name, value in whole.cleaned_data.items()
                           if value not in (None, "", [], (), {})}
