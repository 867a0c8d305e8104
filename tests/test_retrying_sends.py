"""kafka.RetryingSends: what the broker did not acknowledge is sent again, the same bytes, while the
failure is one that passes (the broker away or restarting); anything else is raised at once.

The producer here is a stand-in with aiokafka's ``send`` contract (a coroutine returning the
delivery future); the path through a real broker killed mid-produce is the Apache Kafka fault test
(tests/integration/test_durability.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, TopicAuthorizationFailedError

from gangway.adapters.kafka import RetryingSends


class FlakyProducer:
    """Fails the first ``failures`` sends with ``error`` (as a failed delivery, or raised by send)."""

    def __init__(self, failures: int, error: Exception, raise_on_send: bool = False):
        self.failures, self.error, self.raise_on_send = failures, error, raise_on_send
        self.sent: list[tuple[str, bytes]] = []

    async def send(self, topic, value=None, key=None, headers=None, partition=None):
        self.sent.append((topic, value))
        future = asyncio.get_running_loop().create_future()
        if self.failures:
            self.failures -= 1
            if self.raise_on_send:
                raise self.error
            future.set_exception(self.error)
        else:
            future.set_result(SimpleNamespace(offset=len(self.sent) - 1))
        return future


def run(prod, retry_s: float = 5.0, n: int = 3) -> tuple[set[str], RetryingSends]:
    async def go():
        sends = RetryingSends(prod, "gangway.submissions", retry_s)
        sends.RETRY_PAUSE_S = 0.01
        for i in range(n):
            await sends.send(f"job-{i}", b"k", f"v{i}".encode(), [])
        return await sends.acknowledged(), sends
    return asyncio.run(go())


@pytest.mark.parametrize("error, raise_on_send", [
    (KafkaConnectionError("broker gone"), False), (KafkaTimeoutError(), False), (KafkaConnectionError("x"), True)])
def test_sends_the_broker_did_not_acknowledge_go_again_with_the_same_bytes(error, raise_on_send):
    prod = FlakyProducer(failures=4, error=error, raise_on_send=raise_on_send)
    done, sends = run(prod)
    assert done == {"job-0", "job-1", "job-2"}
    assert sends.resent == 4 and sends.end == len(prod.sent)
    assert sorted(set(prod.sent)) == [("gangway.submissions", b"v0"), ("gangway.submissions", b"v1"),
                                      ("gangway.submissions", b"v2")]


def test_an_error_that_does_not_pass_is_raised_at_once():
    prod = FlakyProducer(failures=1, error=TopicAuthorizationFailedError())
    with pytest.raises(TopicAuthorizationFailedError):
        run(prod)
    assert len(prod.sent) == 3


def test_a_broker_away_longer_than_the_caller_allows_is_raised():
    prod = FlakyProducer(failures=10**6, error=KafkaConnectionError("still gone"))
    with pytest.raises(KafkaConnectionError):
        run(prod, retry_s=0.1)
