"""The fine-tuning tasks by name: `get("mrpc", config)`, `get("squad2", config)`.

>>> list(TASKS)  # doctest: +NORMALIZE_WHITESPACE
['cola', 'sst2', 'mrpc', 'stsb', 'qqp', 'mnli', 'qnli', 'rte', 'squad1', 'squad2',
 'conll2003', 'conll2000', 'tagging']
>>> get("squad1").primary_metric, get("rte").schedule.epochs
('f1', 10.0)
"""

import functools

from electra_tf import errors
from electra_tf.finetuning import task as task_lib
from electra_tf.finetuning.glue import specs as glue_specs
from electra_tf.finetuning.glue import task as glue_task
from electra_tf.finetuning.squad import task as squad_task
from electra_tf.finetuning.tagging import task as tagging_task

# name → a Task class with its arguments but the config.
TASKS = {**{name: functools.partial(glue_task.GlueTask, spec)
            for name, spec in glue_specs.TASKS.items()},
         "squad1": functools.partial(squad_task.SquadTask, "squad1"),
         "squad2": functools.partial(squad_task.SquadTask, "squad2"),
         **{name: functools.partial(tagging_task.TaggingTask, name)
            for name in tagging_task.SCHEDULES}}


def get(name: str, config=None) -> task_lib.Task:
    """The task called `name`, bound to a run's `config`."""
    if name not in TASKS:
        raise errors.UserError(f"config.task={name!r}: choose one of {', '.join(TASKS)}")
    return TASKS[name](config=config)
