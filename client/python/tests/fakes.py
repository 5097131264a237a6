"""Test doubles for the unit tests: a fake Coordinator stub that records
requests and answers from a script, and a grpc.RpcError with a code."""

import collections

import grpc


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details):
        super().__init__(details)
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


class _Method:
    def __init__(self, stub, name):
        self._stub, self._name = stub, name

    def __call__(self, request, timeout=None, metadata=None):
        self._stub.calls.append((self._name, request, timeout, metadata))
        answers = self._stub.answers[self._name]
        if not answers:
            raise AssertionError("unexpected call of %s(%s)" % (self._name, request))
        answer = answers.popleft() if len(answers) > 1 else answers[0]
        if callable(answer):
            answer = answer(request)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def future(self, request, timeout=None, metadata=None):
        method = self

        class _Future:
            def result(self):
                return method(request, timeout, metadata)
        return _Future()


class FakeStub:
    """Answers each method from ``answers[name]``: a deque of responses,
    exceptions, or callables of the request; the last answer repeats.
    ``calls`` lists (method, request, timeout, metadata)."""

    def __init__(self):
        self.answers = collections.defaultdict(collections.deque)
        self.calls = []

    def answer(self, method, *responses):
        self.answers[method].extend(responses)
        return self

    def requests(self, method):
        return [c[1] for c in self.calls if c[0] == method]

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return _Method(self, name)
