"""The task family (`finetuning.task.Task`, `tasks.TASKS`): every member fills in the
hooks the base marks as a member's, is made as Member(config), and configures a fresh
config."""

import ml_collections
import pytest

from electra_tf import errors
from electra_tf.finetuning import task as task_lib
from electra_tf.finetuning import tasks

_HOOKS = ("configure", "read", "build_model", "loss", "evaluate", "export")


@pytest.mark.parametrize("name", list(tasks.TASKS))
def test_every_member_fills_in_the_hooks_and_is_made_from_a_config(name):
    member = tasks.TASKS.get(name)
    assert issubclass(member, task_lib.Task) and member.name == name
    assert member.eval_splits and member.primary_metric
    assert isinstance(member.schedule, task_lib.Schedule)
    for hook in _HOOKS:
        assert getattr(member, hook) is not getattr(task_lib.Task, hook), (name, hook)
    config = ml_collections.ConfigDict({"data": {}, "model": {}})
    member(None).configure(config)
    assert tasks.get(name, config).config is config


def test_an_unknown_task_names_the_key_and_the_choices():
    with pytest.raises(errors.UserError, match=r"^config.task='nli': choose one of cola, "):
        tasks.get("nli")
