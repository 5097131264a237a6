"""Client.create_token, list_tokens, revoke_token and audit against a fake
stub (no network)."""

import datetime
import time
import unittest

import grpc

import trainctl
from trainctl.client import Client
from trainctl.v1 import auth_pb2, service_pb2

from fakes import FakeRpcError, FakeStub


class TokenTest(unittest.TestCase):
    def setUp(self):
        self.stub = FakeStub()
        self.client = Client._for_stub(self.stub, token="admin-token-0123456789")

    def test_create_token_maps_arguments_and_returns_secret_once(self):
        made = service_pb2.CreateTokenResponse(
            token=auth_pb2.TokenInfo(id="tok-0123456789ab", user="alice",
                                     role=auth_pb2.ROLE_ADMIN),
            secret="s" * 64)
        self.stub.answer("CreateToken", made)
        got = self.client.create_token("alice", role="admin",
                                       expires=datetime.timedelta(days=90), name="laptop")
        (request,) = self.stub.requests("CreateToken")
        self.assertEqual(request.user, "alice")
        self.assertEqual(request.role, auth_pb2.ROLE_ADMIN)
        self.assertEqual(request.expires_s, 90 * 86400)
        self.assertEqual(request.name, "laptop")
        self.assertEqual(got.secret, "s" * 64)
        self.assertEqual(got.token.id, "tok-0123456789ab")

    def test_create_token_defaults_user_role_never_expires(self):
        self.stub.answer("CreateToken", service_pb2.CreateTokenResponse())
        self.client.create_token("bob")
        (request,) = self.stub.requests("CreateToken")
        self.assertEqual(request.role, auth_pb2.ROLE_USER)
        self.assertEqual(request.expires_s, 0)

    def test_create_token_bad_role_or_lifetime_raises_before_any_call(self):
        with self.assertRaises(trainctl.InvalidArgument) as cm:
            self.client.create_token("bob", role="root")
        self.assertIn("role", str(cm.exception))
        with self.assertRaises(trainctl.InvalidArgument) as cm:
            self.client.create_token("bob", expires=0)
        self.assertIn("expires", str(cm.exception))
        self.assertEqual(self.stub.calls, [])

    def test_list_and_revoke(self):
        listed = service_pb2.ListTokensResponse(tokens=[
            auth_pb2.TokenInfo(id="tok-a", user="alice"),
            auth_pb2.TokenInfo(id="tok-b", user="bob", revoked_ms=5, revoked_by="ops")])
        self.stub.answer("ListTokens", listed)
        self.assertEqual([t.id for t in self.client.list_tokens(all=True)], ["tok-a", "tok-b"])
        self.assertTrue(self.stub.requests("ListTokens")[0].all)
        self.stub.answer("RevokeToken", service_pb2.RevokeTokenResponse(
            token=auth_pb2.TokenInfo(id="tok-a", revoked_ms=7, revoked_by="ops")))
        revoked = self.client.revoke_token("tok-a")
        self.assertEqual(self.stub.requests("RevokeToken")[0].id, "tok-a")
        self.assertEqual(revoked.revoked_by, "ops")

    def test_non_admin_permission_denied(self):
        self.stub.answer("ListAudit", FakeRpcError(
            grpc.StatusCode.PERMISSION_DENIED,
            "user bob may not read the audit trail: only an admin (role ROLE_ADMIN) may"))
        with self.assertRaises(trainctl.PermissionDenied) as cm:
            self.client.audit()
        self.assertIn("only an admin", str(cm.exception))

    def test_audit_since_datetime_or_timedelta(self):
        events = service_pb2.ListAuditResponse(events=[
            auth_pb2.AuditEvent(seq=1, who="ops", action="token.create", target="tok-a")])
        self.stub.answer("ListAudit", events)
        got = self.client.audit(since=datetime.datetime(2026, 11, 1), limit=50)
        self.assertEqual([e.action for e in got], ["token.create"])
        request = self.stub.requests("ListAudit")[0]
        self.assertEqual(request.since_ms, 1793491200000)  # 2026-11-01T00:00:00Z
        self.assertEqual(request.limit, 50)
        before = time.time()
        self.client.audit(since=datetime.timedelta(days=7))
        request = self.stub.requests("ListAudit")[1]
        self.assertAlmostEqual(request.since_ms / 1000, before - 7 * 86400, delta=5)
        self.client.audit()
        self.assertEqual(self.stub.requests("ListAudit")[2].since_ms, 0)


if __name__ == "__main__":
    unittest.main()
