"""Who may take a task and why not: one set of verdicts for dispatch, reassign and the
explainer on the task page (inbox.eligibility); weighted capacity."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import Availability, Dispatch, Skill, User
from accounts.roles import Role
from accounts.services import worker_set_availability, worker_set_capacity
from config.errors import Conflict
from inbox.board import eligible_workers
from inbox.eligibility import REOFFER_COOLDOWN, Reason, task_eligibility, worker_verdicts
from inbox.lifecycle import transition
from inbox.models import Task, TaskState
from inbox.selectors import capacity_check, eligibility_problem, hold_problem, worker_load
from inbox.services.clock import deadlines_sweep
from inbox.services.dispatcher import offer_candidates, task_dispatch
from inbox.services.supervisor import task_reassign
from inbox.services.worker import task_claim, task_decline, task_take_next
from tests.factories import envelope

TIMEOUTS = {"offer": 60, "work": 600, "overall": 86400}


@pytest.fixture(autouse=True)
def quick_passwords(settings):
    """A crowd of users per test: hash their passwords cheaply."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _fresh(task: Task) -> Task:
    return Task.objects.select_related("skill").get(pk=task.pk)


@pytest.fixture
def crowd(make_task, make_worker, make_user, check_skill, review_skill, clock):
    """A push task of document-check at proficiency 3 that excludes the workers of its
    execution's review stage, and a worker excluded by each reason (two eligible)."""
    execution = envelope()["execution"]
    review = make_task(execution=execution, stage="review")
    task = make_task(execution=execution, stage="check", skill="document-check",
                     minProficiency=3, excludeWorkersOf=["review"], timeouts=TIMEOUTS)
    other = make_task(skill="document-check", timeouts=TIMEOUTS)

    def worker(name, proficiency=3, **kwargs):
        return make_worker({"document-check": proficiency}, email=f"{name}@example.com",
                           **kwargs)

    people = {
        "eligible": worker("eligible", 3),
        "expert": worker("expert", 5),
        "inactive": worker("inactive"),
        "notworker": worker("notworker", roles=(Role.SUPERVISOR,)),
        "novice": worker("novice", 1),
        "separated": make_worker({"document-check": 3, "invoice-review": 1},
                                 email="separated@example.com"),
        "decliner": worker("decliner"),
        "lapser": worker("lapser"),
        "away": worker("away"),
        "full": worker("full"),
    }
    User.objects.filter(pk=people["inactive"].pk).update(is_active=False)
    task_claim(worker=people["separated"], task_id=review.pk)
    transition(task_id=task.pk, action="offer", worker=people["decliner"])
    task_decline(worker=people["decliner"], task_id=task.pk, reason="Not my area.")
    transition(task_id=task.pk, action="offer", worker=people["lapser"])
    deadlines_sweep(now=clock.advance(seconds=61))
    worker_set_availability(worker=people["away"], availability=Availability.AWAY)
    worker_set_capacity(worker=people["full"], capacity=1)
    transition(task_id=other.pk, action="offer", worker=people["full"])
    return {"task": _fresh(task), "people": people}


EXPECTED = {
    "eligible": None, "expert": None, "inactive": Reason.INACTIVE,
    "notworker": Reason.NOT_WORKER, "novice": Reason.PROFICIENCY,
    "separated": Reason.SEPARATION, "decliner": Reason.DECLINED, "lapser": Reason.LAPSED,
    "away": Reason.AWAY, "full": Reason.CAPACITY,
}


@pytest.mark.parametrize("dispatch", [Dispatch.PUSH, Dispatch.PULL])
def test_the_explainer_gives_one_reason_per_excluded_worker_and_dispatchs_choice(
    crowd, dispatch
):
    """Each worker excluded by one reason shows exactly it; the eligible ones are exactly
    those offer_candidates returns, for a push queue and (switched) a pull queue."""
    Skill.objects.filter(slug="document-check").update(dispatch=dispatch)
    task = _fresh(crowd["task"])
    verdicts = task_eligibility(task=task)

    shown = {v.worker.email.split("@")[0]: v.reason for v in verdicts}
    assert shown == EXPECTED
    for verdict in verdicts:
        assert len(verdict.reasons) == (0 if verdict.eligible else 1), verdict
        assert verdict.words
    eligible = [v.worker for v in verdicts if v.eligible]
    assert eligible == offer_candidates(task=task)
    assert eligible == [v.worker for v in worker_verdicts(task=task) if v.eligible]
    assert {w.email for w in eligible} == {"eligible@example.com", "expert@example.com"}
    lapsed = next(v for v in verdicts if v.reason == Reason.LAPSED)
    assert lapsed.until is not None and "cooling down" in lapsed.words


def test_the_lapser_is_eligible_again_after_the_cool_down_and_comes_last(crowd, clock):
    clock.advance(seconds=REOFFER_COOLDOWN.total_seconds() + 1)
    task = crowd["task"]
    candidates = [w.email for w in offer_candidates(task=task)]
    assert candidates[-1] == "lapser@example.com"
    assert set(candidates) == {"eligible@example.com", "expert@example.com",
                               "lapser@example.com"}
    assert [v.worker.email for v in task_eligibility(task=task) if v.eligible] == candidates


def test_dispatch_offers_to_an_eligible_worker_and_the_explainer_names_the_holder(crowd):
    task = task_dispatch(task_id=crowd["task"].pk)
    assert task.state == TaskState.OFFERED
    assert task.assignee.email in {"eligible@example.com", "expert@example.com"}
    holder = next(v for v in task_eligibility(task=_fresh(task))
                  if v.worker.pk == task.assignee_id)
    assert (holder.reason, holder.words) == (Reason.HOLDER, "Is offered this task now.")


def test_the_first_reason_is_the_one_shown_when_several_apply(crowd):
    """A novice who is also away and full is shown as the novice: the most lasting."""
    novice = crowd["people"]["novice"]
    worker_set_availability(worker=novice, availability=Availability.AWAY)
    worker_set_capacity(worker=novice, capacity=0)
    verdict = next(v for v in task_eligibility(task=crowd["task"]) if v.worker.pk == novice.pk)
    assert verdict.reasons == (Reason.PROFICIENCY, Reason.AWAY, Reason.CAPACITY)
    assert verdict.words == "Proficiency 1; the task needs 3."


def test_the_verdicts_and_dispatchs_candidates_cost_one_query_however_many_workers(crowd):
    with CaptureQueriesContext(connection) as queries:
        verdicts = worker_verdicts(task=crowd["task"])
    assert len(verdicts) == len(EXPECTED)
    assert len(queries.captured_queries) == 1
    with CaptureQueriesContext(connection) as queries:
        assert len(offer_candidates(task=crowd["task"])) == 2
    assert len(queries.captured_queries) == 1


def test_the_reassign_picker_lists_the_assignable_and_reassign_accepts_exactly_them(
    crowd, supervisor_of_checks
):
    """A supervisor may give the task to a decliner or a lapser (offers only bind
    dispatch); away, full, separated, novice, inactive and non-workers are refused with the
    explainer's words."""
    task = crowd["task"]
    picked = {w.email.split("@")[0] for w in eligible_workers(task=task)}
    assert picked == {"eligible", "expert", "decliner", "lapser"}
    words = {v.worker.email: v.words for v in task_eligibility(task=task)}
    for name in EXPECTED:
        if name in picked:
            continue
        person = crowd["people"][name]
        said = re.escape(f"{person.email} cannot take this task: {words[person.email]}")
        with pytest.raises(Conflict, match=said):
            task_reassign(supervisor=supervisor_of_checks, task_id=task.pk, worker=person,
                          reason="Cover.")
    done = task_reassign(supervisor=supervisor_of_checks, task_id=task.pk,
                         worker=crowd["people"]["decliner"], reason="Asked them to.")
    assert (done.state, done.assignee) == (TaskState.IN_PROGRESS, crowd["people"]["decliner"])


def test_a_reassign_to_an_away_worker_says_so(crowd, supervisor_of_checks):
    with pytest.raises(Conflict, match=r"away@example\.com cannot take this task: Away"):
        task_reassign(supervisor=supervisor_of_checks, task_id=crowd["task"].pk,
                      worker=crowd["people"]["away"], reason="Cover.")


def test_a_worker_may_still_claim_while_away_but_not_past_access(make_task, worker):
    """Away is about being given work: the worker's own claim checks access only."""
    worker_set_availability(worker=worker, availability=Availability.AWAY)
    task = make_task(minProficiency=3)
    assert eligibility_problem(user=worker, task=task) is None
    assert task_claim(worker=worker, task_id=task.pk).assignee == worker
    hard = make_task(minProficiency=5)
    assert eligibility_problem(user=worker, task=hard) == (
        "This task needs invoice-review at proficiency 5; you hold 3.")


@pytest.fixture
def supervisor_of_checks(make_worker, check_skill):
    return make_worker({"document-check": 1}, roles=(Role.SUPERVISOR,),
                       email="boss@example.com")


# Weighted capacity ---------------------------------------------------------------------


@pytest.fixture
def heavy(db):
    """A pull skill whose tasks use 2 capacity units each."""
    skill = Skill.objects.create(slug="audit", name="Audit", weight=2)
    return skill


def test_a_task_uses_its_skills_weight_of_the_workers_capacity(make_task, make_worker,
                                                              heavy, review_skill):
    ana = make_worker({"audit": 3, "invoice-review": 3})
    worker_set_capacity(worker=ana, capacity=3)
    first, second = make_task(skill="audit"), make_task(skill="audit")
    light = make_task()
    task_claim(worker=ana, task_id=first.pk)
    assert worker_load(user=ana) == 2

    with pytest.raises(Conflict, match="capacity is 3 and this task needs 2"):
        task_claim(worker=ana, task_id=second.pk)
    verdict = next(v for v in worker_verdicts(task=_fresh(second)) if v.worker.pk == ana.pk)
    assert (verdict.reason, verdict.words) == (
        Reason.CAPACITY, "At capacity: holds 2 of 3 units; this task needs 2.")
    light_verdict = next(v for v in worker_verdicts(task=_fresh(light))
                         if v.worker.pk == ana.pk)
    assert light_verdict.eligible and light_verdict.free == 1

    # Take next passes over the heavy queue it has no room for and takes the light task.
    assert task_take_next(worker=ana).pk == light.pk
    assert worker_load(user=ana) == 3
    with pytest.raises(Conflict, match="capacity is 3"):
        task_take_next(worker=ana)
    with pytest.raises(Conflict):
        capacity_check(user=ana, weight=1)


def test_the_holder_of_a_heavy_task_is_not_over_capacity_by_holding_it(make_task,
                                                                      make_worker, heavy):
    ana = make_worker({"audit": 3})
    worker_set_capacity(worker=ana, capacity=2)
    task = task_claim(worker=ana, task_id=make_task(skill="audit").pk)
    verdict = next(v for v in worker_verdicts(task=_fresh(task)) if v.worker.pk == ana.pk)
    assert verdict.reasons == (Reason.HOLDER,)


def test_the_lapsers_cool_down_ends_ten_minutes_after_the_lapse(crowd, clock):
    """The offer lapsed at the crowd's last sweep (the clock has not moved since)."""
    lapser = crowd["people"]["lapser"]
    verdict = next(v for v in worker_verdicts(task=crowd["task"]) if v.worker.pk == lapser.pk)
    assert verdict.until == clock.now + REOFFER_COOLDOWN


def test_holding_and_taking_agree_on_access(crowd, make_worker, review_skill):
    """hold_problem (one user, under the task's lock) and the verdicts (many at once) say
    the same of access: active, a worker, the skill, its proficiency."""
    outsider = make_worker({"invoice-review": 5}, email="outsider@example.com")
    task = crowd["task"]
    access = {Reason.INACTIVE, Reason.NOT_WORKER, Reason.SKILL, Reason.PROFICIENCY}
    people = [*crowd["people"].values(), outsider]
    verdicts = {v.worker.pk: v for v in worker_verdicts(
        task=task, workers=User.objects.filter(pk__in=[p.pk for p in people]))}
    assert verdicts[outsider.pk].reason == Reason.SKILL
    for person in people:
        person = User.objects.get(pk=person.pk)
        lacks = access & set(verdicts[person.pk].reasons)
        assert (hold_problem(user=person, task=task) is None) == (not lacks), person.email
