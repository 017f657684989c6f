"""The fine-tuning tasks by name (`task.Task` members): `get("mrpc", config)`.

>>> list(TASKS)  # doctest: +NORMALIZE_WHITESPACE
['cola', 'sst2', 'mrpc', 'stsb', 'qqp', 'mnli', 'qnli', 'rte', 'squad1', 'squad2',
 'conll2003', 'conll2000', 'tagging']
>>> get("squad1").primary_metric, get("rte").schedule.epochs
('f1', 10.0)
"""

from electra_tf import registry
from electra_tf.finetuning import task as task_lib
from electra_tf.finetuning.glue import task as glue
from electra_tf.finetuning.squad import task as squad
from electra_tf.finetuning.tagging import task as tagging

TASKS = registry.Registry("config.task", [
    *glue.MEMBERS,                       # cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte
    squad.Squad1, squad.Squad2,
    tagging.Conll2003, tagging.Conll2000, tagging.Tagging])


def get(name: str, config=None) -> task_lib.Task:
    """The task called `name`, made from a run's `config` (`TASKS.create`)."""
    return TASKS.create(name, config)
