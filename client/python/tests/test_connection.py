"""Where the Client finds the coordinator, token and CA: arguments, the
environment and the CLI's config file, in the CLI's order (no network)."""

import os
import tempfile
import unittest
import warnings

import trainctl
from trainctl import connection

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


class ResolveTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.home = self.dir.name
        self.config = os.path.join(self.home, ".config", "trainctl", "config")
        os.makedirs(os.path.dirname(self.config))
        self.ca = os.path.join(self.home, "ca.crt")
        with open(self.ca, "wb") as f:
            f.write(PEM)
        self.env = {"HOME": self.home}

    def write_config(self, text, mode=0o600):
        with open(self.config, "w") as f:
            f.write(text)
        os.chmod(self.config, mode)

    def resolve(self, **kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tests of the warnings below record them
            return connection.resolve(environ=self.env, **kw)

    def test_resolve_nothing_set_is_loopback_default(self):
        c = self.resolve()
        self.assertEqual((c.address, c.token, c.ca_pem), ("127.0.0.1:50051", "", b""))

    def test_resolve_config_file_keys(self):
        self.write_config('# mine\ncoordinator = "head:50051"\ntoken = "tok-file"  # x\n'
                          "ca_cert = '%s'\n" % self.ca)
        c = self.resolve()
        self.assertEqual((c.address, c.token, c.ca_pem), ("head:50051", "tok-file", PEM))

    def test_resolve_env_beats_file_and_argument_beats_env(self):
        self.write_config('coordinator = "file:1"\ntoken = "tok-file"\n')
        self.env.update(TRAINCTL_COORDINATOR="env:2", TRAINCTL_AUTH_TOKEN="tok-env")
        c = self.resolve()
        self.assertEqual((c.address, c.token), ("env:2", "tok-env"))
        c = self.resolve(address="arg:3", token="tok-arg")
        self.assertEqual((c.address, c.token), ("arg:3", "tok-arg"))

    def test_resolve_task_token_is_never_the_user_token(self):
        # TRAINCTL_TOKEN is a task's per-attempt rendezvous token.
        self.env["TRAINCTL_TOKEN"] = "attempt-token"
        self.assertEqual(self.resolve().token, "")

    def test_resolve_xdg_config_home_wins_over_home(self):
        xdg = os.path.join(self.home, "xdg")
        os.makedirs(os.path.join(xdg, "trainctl"))
        with open(os.path.join(xdg, "trainctl", "config"), "w") as f:
            f.write('coordinator = "xdg:9"\n')
        self.write_config('coordinator = "home:9"\n')
        self.env["XDG_CONFIG_HOME"] = xdg
        self.assertEqual(self.resolve().address, "xdg:9")

    def test_resolve_bad_config_names_file_and_key(self):
        for text, pattern in (('colour = "red"\n', 'unknown key "colour"'),
                              ('[section]\n', "no sections"),
                              ('coordinator = ["a:1", "b:2"]\n', "expected one value"),
                              ("just words\n", "expected key")):
            with self.subTest(text=text):
                self.write_config(text)
                with self.assertRaisesRegex(trainctl.InvalidArgument, pattern) as cm:
                    self.resolve()
                self.assertIn(self.config, str(cm.exception))

    def test_resolve_explicit_missing_config_file_is_invalid(self):
        with self.assertRaisesRegex(trainctl.InvalidArgument, "no such file"):
            self.resolve(config_file=os.path.join(self.home, "nope"))

    def test_resolve_ca_from_env_and_unreadable_ca(self):
        self.env["TRAINCTL_TLS_CA"] = self.ca
        self.assertEqual(self.resolve().ca_pem, PEM)
        with self.assertRaisesRegex(trainctl.InvalidArgument, "PEM certificate"):
            self.resolve(ca_cert=os.path.join(self.home, "missing.crt"))
        self.assertEqual(self.resolve(ca_cert=PEM).ca_pem, PEM)

    def test_resolve_token_with_space_is_invalid(self):
        with self.assertRaisesRegex(trainctl.InvalidArgument, "printable ASCII"):
            self.resolve(token="two words")

    def test_resolve_warns_readable_token_file_and_plaintext_token_off_host(self):
        self.write_config('coordinator = "head:50051"\ntoken = "tok"\n', mode=0o644)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            connection.resolve(environ=self.env)
        messages = [str(w.message) for w in caught]
        self.assertTrue(any("chmod 600" in m for m in messages), messages)
        self.assertTrue(any("without TLS" in m for m in messages), messages)

    def test_resolve_no_warning_on_loopback_with_private_file(self):
        self.write_config('token = "tok"\n')
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            connection.resolve(environ=self.env)
        self.assertEqual([str(w.message) for w in caught], [])


class TargetTest(unittest.TestCase):
    def test_grpc_target_one_address_unchanged(self):
        self.assertEqual(connection.grpc_target("head:50051"), "head:50051")

    def test_grpc_target_list_is_static_ipv4_list(self):
        self.assertEqual(connection.grpc_target("127.0.0.1:1, 127.0.0.2:2"),
                         "ipv4:127.0.0.1:1,127.0.0.2:2")
        self.assertEqual(connection.first_host("head-a:1,head-b:2"), "head-a")

    def test_grpc_target_bad_addresses(self):
        for text, pattern in (("", "empty"), ("head", "host:port"), ("head:0", "1..65535"),
                              ("[::1:5", "unbalanced"), ("127.0.0.1:1,[::1]:2", "mix")):
            with self.subTest(text=text):
                with self.assertRaisesRegex(trainctl.InvalidArgument, pattern):
                    connection.grpc_target(text)


if __name__ == "__main__":
    unittest.main()
