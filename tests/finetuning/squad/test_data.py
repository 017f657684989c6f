"""SQuAD's questions (`finetuning.squad.data`): reading JSON, one-line errors naming the
question, answers found near their offsets."""

import json
import os

import pytest

from electra_tf import errors
from electra_tf.finetuning.squad import data as squad_data

CONTEXT = ("the cat sat on the mat . the dog ran in the big red house . a small bird sat "
           "on a tree . the happy dog was not sad .")


def _squad_file(path, questions, version="1.1"):
    """questions: [(qid, question, context, [(text, start)], is_impossible)]."""
    paragraphs = [{"context": context, "qas": [
        {"id": qid, "question": question, "is_impossible": impossible,
         "answers": [{"text": t, "answer_start": s} for t, s in answers]}]}
        for qid, question, context, answers, impossible in questions]
    path.write_text(json.dumps({"version": version, "data": [
        {"title": "t", "paragraphs": paragraphs}]}), encoding="utf-8")
    return str(path)


def test_read_json_v1_and_v2(tmp_path):
    start = CONTEXT.index("big red house")
    path = _squad_file(tmp_path / "train.json", [
        ("a1", "where did the dog run ?", CONTEXT, [("big red house", start)], False),
        ("a2", "what did the cow eat ?", CONTEXT, [], True)], version="v2.0")
    questions = squad_data.read_json(path)
    assert [q.qid for q in questions.items] == ["a1", "a2"] and questions.skipped == 0
    assert questions.items[0].answer_chars() == (start, start + len("big red house"))
    assert questions.items[1].is_impossible and not questions.items[0].is_impossible


def test_bad_files_are_one_line_errors_naming_the_question(tmp_path):
    wrong = _squad_file(tmp_path / "wrong.json", [
        ("good", "where ?", CONTEXT, [("cat", 4)], False),
        ("q17", "where ?", CONTEXT, [("big red house", 3)], False)])
    with pytest.raises(squad_data.SquadDataError) as info:
        squad_data.read_json(wrong)
    message = str(info.value)
    assert message.startswith(f"{wrong}: question q17: answer 'big red house' is not in "
                              "the context near answer_start=3") and "\n" not in message
    assert message.endswith(errors.SKIP_HINT)  # and the way past it
    skipped = squad_data.read_json(wrong, on_bad="skip")
    assert ([q.qid for q in skipped.items], skipped.skipped) == (["good"], 1)
    assert skipped.first_skipped.startswith(f"{wrong}: question q17")
    # A dev split keeps it: only answer texts are scored, every question counts.
    dev = squad_data.read_json(wrong, train=False)
    assert [q.qid for q in dev.items] == ["good", "q17"] and dev.skipped == 0
    assert dev.items[1].answer_chars() is None
    for bad, message in (('{"data": [1]}', r'"data" is not a list of objects'),
                         ('{"data": [{"paragraphs": [[]]}]}',
                          r'data\[0\]: "paragraphs" is not a list of objects'),
                         ('{"data": [{"paragraphs": [{"context": "c", "qas": ["q"]}]}]}',
                          r'data\[0\].paragraphs\[0\]: "qas" is not a list of objects')):
        malformed = tmp_path / "malformed.json"
        malformed.write_text(bad)
        for train in (True, False):  # structure is an error in every split
            with pytest.raises(squad_data.SquadDataError, match=f"^{malformed}: {message}$"):
                squad_data.read_json(str(malformed), on_bad="skip", train=train)
    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [\n  {"title": }\n]}')
    with pytest.raises(squad_data.SquadDataError, match=r"broken.json:2:\d+: not JSON"):
        squad_data.read_json(str(broken))
    other = tmp_path / "other.json"
    other.write_text('[1, 2]')
    with pytest.raises(squad_data.SquadDataError, match="not a SQuAD file"):
        squad_data.read_json(str(other))
    with pytest.raises(squad_data.SquadDataError, match="no train-v2.0.json in"):
        squad_data.load("squad2", "train", data_dir=str(tmp_path))


def test_squad1_questions_without_an_answer_are_bad_in_every_split(tmp_path):
    """1.1's metrics take the best score over a question's answers: none cannot be scored
    (the official script fails), and training would learn "impossible" from 2.0's kind."""
    path = _squad_file(tmp_path / "dev-v1.1.json", [
        ("good", "where ?", CONTEXT, [("cat", 4)], False),
        ("q8", "where ?", CONTEXT, [], False),
        ("q9", "where ?", CONTEXT, [("cat", 4)], True)])
    for train in (True, False):
        with pytest.raises(squad_data.SquadDataError) as info:
            squad_data.read_json(path, train=train, version="squad1")
        assert str(info.value).startswith(f"{path}: question q8: no answer")
        assert "\n" not in str(info.value) and str(info.value).endswith(errors.SKIP_HINT)
        skipped = squad_data.read_json(path, "skip", train=train, version="squad1")
        assert ([q.qid for q in skipped.items], skipped.skipped) == (["good"], 2)
    with pytest.raises(squad_data.SquadDataError, match="dev-v1.1.json: question q8: no"):
        squad_data.load("squad1", "validation", data_dir=str(tmp_path))
    assert len(squad_data.read_json(path, version="squad2")) == 3  # 2.0's unanswerable


def test_dev_keeps_every_question_it_can_predict(tmp_path):
    """An empty question or an answer away from its offset is bad for training only: a
    dev question is predicted from the context and scored by its answer texts, and the
    official scripts count every question."""
    path = _squad_file(tmp_path / "squad.json", [
        ("good", "where ?", CONTEXT, [("cat", 4)], False),
        ("blank", "  ", CONTEXT, [("cat", 4)], False),
        ("moved", "where ?", CONTEXT, [("cat", 30)], False)])
    train = squad_data.read_json(path, "skip", version="squad1")
    assert ([q.qid for q in train.items], train.skipped) == (["good"], 2)
    for on_bad in ("error", "skip"):
        dev = squad_data.read_json(path, on_bad, train=False, version="squad1")
        assert ([q.qid for q in dev.items], dev.skipped) == (["good", "blank", "moved"], 0)


def test_training_answers_off_by_a_few_characters_are_found(tmp_path):
    """As the original's tolerant match: answer_start off by 1-2 characters, or text that
    differs in case and spacing, still trains on the context's own span."""
    start = CONTEXT.index("big red house")
    path = _squad_file(tmp_path / "train.json", [
        ("late", "where ?", CONTEXT, [("big red house", start + 1)], False),
        ("early", "where ?", CONTEXT, [("big red house", start - 2)], False),
        ("spaced", "where ?", CONTEXT, [("Big  red\thouse", start)], False),
        ("other", "where ?", CONTEXT, [("big red house", start + 2), ("cat", 0)], False)])
    questions = squad_data.read_json(path)
    assert questions.skipped == 0
    for q in questions.items:
        assert q.answer_chars() == (start, start + len("big red house")), q.qid
    # The later answers are not checked (scoring uses their texts only).
    assert squad_data.load("squad1", "train", data_dir=str(_rename(path, "train-v1.1.json")))


def _rename(path, name):
    os.replace(path, os.path.join(os.path.dirname(path), name))
    return os.path.dirname(path)
