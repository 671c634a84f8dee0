from tests.support.factories import FAR


def test_a_targeted_promise_gets_a_pending_task_and_an_execute(api):
    res = api("promise.create", id="p", timeoutAt=FAR, tags={"resonate:target": "poll://any@g"})
    assert res.status == 200
    assert res.data["promise"]["state"] == "pending"
    task = api("task.get", id="p").data["task"]
    assert task == {"id": "p", "state": "pending", "version": 0, "resumes": 0}
