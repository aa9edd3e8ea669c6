"""The response text's chunks built from one prebuilt event equal the ones built field by field."""

from a2a.types import Task

from a2a_gateway.events import TextChunks, new_id, text_chunk


def test_chunks_equal_the_field_by_field_builder_and_share_nothing():
    task = Task(id=new_id(), context_id=new_id())
    artifact_id = new_id()
    chunks = TextChunks(task, artifact_id)

    first, second, third = chunks.first("Hello"), chunks.next(" wor"), chunks.next("ld")

    assert first == text_chunk(task, artifact_id, "Hello", append=False)
    assert second == text_chunk(task, artifact_id, " wor", append=True)
    assert third == text_chunk(task, artifact_id, "ld", append=True)
    second.artifact.parts.add(text="changed")  # a subscriber's backlog merges into its own copy
    assert [p.text for p in chunks.next("x").artifact.parts] == ["x"]
    assert [p.text for p in third.artifact.parts] == ["ld"]
