"""Members of a family by name: one registry class for every family.

A family (the pre-training objectives, the training algorithms, the fine-tuning tasks,
the checkpoint formats) is a small documented base class whose subclasses fill in its
hooks, and one `Registry` of them. Every member is a class with a `name` and is made
the same way, from the run's config (`None` where only what the class says is read; a
member with settings of its own, two_stage's switch step, needs the config and says so
in one line):

    class Mine(base.Objective):        # one file: the member
        name = "mine"
        ...

    OBJECTIVES = registry.Registry("config.model.objective",
                                   [..., mine.Mine])   # one line: the registry's

    OBJECTIVES.create("mine", config)  # Mine(config)

An unknown name is a one-line error naming the config key (or flag) that gave it, and
the choices.

>>> class Plain:
...     name = "plain"
...     def __init__(self, config=None):
...         self.config = config
>>> class Fancy(Plain):
...     name = "fancy"
>>> FAMILY = Registry("config.train.thing", [Plain, Fancy])
>>> list(FAMILY), "fancy" in FAMILY, FAMILY.get("plain") is Plain
(['plain', 'fancy'], True, True)
>>> FAMILY.create("fancy", {"a": 1}).config
{'a': 1}
>>> FAMILY.create("other")
Traceback (most recent call last):
...
electra_tf.errors.UserError: config.train.thing='other': choose one of plain, fancy
>>> FAMILY.register(Plain)
Traceback (most recent call last):
...
ValueError: config.train.thing: a member named 'plain' is registered already
"""

from collections.abc import Iterable, Iterator

from electra_tf import errors


class Registry:
    """The members of one family by their `name`, in the order registered (the order
    in which choices are listed)."""

    def __init__(self, key: str, members: Iterable[type] = (),
                 error: type[Exception] = errors.UserError):
        """`key`: the config key or flag that names a member, for errors; `error`: what
        an unknown name raises (a `UserError` subclass for a tool of its own)."""
        self.key = key
        self.error = error
        self._members: dict[str, type] = {}
        for member in members:
            self.register(member)

    def register(self, member: type, name: str | None = None) -> type:
        """Adds `member` under `name` (default its `name` attribute); returns it, so it
        also decorates a class."""
        name = name or getattr(member, "name", "")
        if not name:
            raise ValueError(f"{self.key}: {member.__name__} has no `name`")
        if name in self._members:
            raise ValueError(f"{self.key}: a member named {name!r} is registered already")
        self._members[name] = member
        return member

    def get(self, name: str) -> type:
        """The member class called `name`; `error` naming the key otherwise."""
        errors.check_choice(self.key, name, self._members, self.error)
        return self._members[name]

    def create(self, name: str, config=None):
        """The member called `name`, made from the run's `config`: `Member(config)`."""
        return self.get(name)(config)

    def items(self):
        return self._members.items()

    def __contains__(self, name) -> bool:
        return name in self._members

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)
