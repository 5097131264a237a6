// Coordinator error texts come back without CLI hints (hints.go).
package main

import (
	"encoding/json"
	"regexp"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The coordinator's messages with CLI hints, verbatim (coordinator/auth.cc,
// coordinator/job_spec.cc), and what a REST caller reads.
var coordinatorHintMessages = []struct{ in, want string }{
	{"no credentials: send `authorization: Bearer <token>` (trainctl --token, $TRAINCTL_AUTH_TOKEN or `token` in ~/.config/trainctl/config)",
		"no credentials: send the HTTP header `Authorization: Bearer <token>`"},
	{"spec.command: is empty: give the program to run after `--`",
		"spec.command: is empty: give the program to run and its arguments as a list of strings"},
	{"spec.gpus: a GPU share (--gpu-fraction/--gpu-mem) is for one process on one GPU; drop --gpus",
		"spec.gpus: a GPU share (spec.gpu_fraction/spec.gpu_memory_bytes) is for one process on one GPU; drop spec.gpus"},
	{"spec.gpus_per_node: --nodes and --gpus-per-node go together",
		"spec.gpus_per_node: spec.nodes and spec.gpus_per_node go together"},
	{"spec.nodes: a multi-node gang takes whole GPUs; drop --gpu-fraction/--gpu-mem",
		"spec.nodes: a multi-node gang takes whole GPUs; drop spec.gpu_fraction/spec.gpu_memory_bytes"},
	{"spec.auto_pack: only experiments (one process on one GPU) can be auto-packed; drop --gpus/--nodes or --auto-pack",
		"spec.auto_pack: only experiments (one process on one GPU) can be auto-packed; drop spec.gpus/spec.nodes or spec.auto_pack"},
	{"spec.placement: --pack/--spread place the ranks of a gang (--gpus > 1 or --nodes); this job is one process",
		"spec.placement: GANG_PLACEMENT_PACK/SPREAD place the ranks of a gang (spec.gpus > 1 or spec.nodes); this job is one process"},
	{"spec.preflight: --preflight checks the NCCL links between the ranks of a gang (--gpus > 1 or --nodes); this job is one process",
		"spec.preflight: PREFLIGHT_MODE_ON checks the NCCL links between the ranks of a gang (spec.gpus > 1 or spec.nodes); this job is one process"},
}

// cliHint: what must not reach a REST caller.
var cliHint = regexp.MustCompile("trainctl |`--`|--(gpus|gpu-|nodes|auto-pack|pack|spread|preflight\\b|time-limit)")

func TestRestHints_CoordinatorMessages_RephrasedForREST(t *testing.T) {
	for _, c := range coordinatorHintMessages {
		got := restHints(c.in)
		if got != c.want {
			t.Errorf("restHints(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
		if cliHint.MatchString(got) {
			t.Errorf("restHints(%q) = %q still has a CLI hint", c.in, got)
		}
	}
}

func TestRestHints_OtherTexts_Unchanged(t *testing.T) {
	for _, msg := range []string{
		// Daemon flags and plain messages are not the CLI's.
		"unknown or revoked token (not in the coordinator's --tokens-file)",
		"no result within --preflight-timeout 60s",
		"start this agent with another --node-name, or stop that one first",
		"job 42 does not exist",
		"spec.gpu_fraction: must be in [0.001, 1], got 1.5",
		"authorization: expected \"Bearer <token>\"",
	} {
		if got := restHints(msg); got != msg {
			t.Errorf("restHints(%q) = %q, want it unchanged", msg, got)
		}
	}
}

func TestRestHintsError_KeepsCodeAndDetails(t *testing.T) {
	in := status.New(codes.InvalidArgument, coordinatorHintMessages[2].in)
	out := status.Convert(restHintsError(in.Err()))
	if out.Code() != codes.InvalidArgument || out.Message() != coordinatorHintMessages[2].want {
		t.Errorf("got %v %q", out.Code(), out.Message())
	}
	if err := restHintsError(nil); err != nil {
		t.Errorf("restHintsError(nil) = %v", err)
	}
}

// Through the gateway: a unary call's 401 and a stream's error line.
func TestErrorBody_Unauthenticated_NoCLIHint(t *testing.T) {
	f := &fakeCoordinator{err: status.Error(codes.Unauthenticated, coordinatorHintMessages[0].in)}
	web := startGatewayWith(t, f)

	resp, body := get(t, web.URL+"/v1/nodes", "")
	if resp.StatusCode != 401 || object(t, body)["message"] != coordinatorHintMessages[0].want {
		t.Errorf("GET /v1/nodes: HTTP %d %s", resp.StatusCode, body)
	}
	resp, body = get(t, web.URL+"/v1/jobs/401/logs:stream", "")
	var line struct{ Error struct{ Message string } }
	if err := json.Unmarshal([]byte(body), &line); err != nil || resp.StatusCode != 401 ||
		line.Error.Message != coordinatorHintMessages[0].want {
		t.Errorf("GET /v1/jobs/401/logs:stream: HTTP %d %s", resp.StatusCode, body)
	}
}

func TestErrorBody_InvalidSpec_FlagsBecomeFields(t *testing.T) {
	f := &fakeCoordinator{err: status.Error(codes.InvalidArgument, coordinatorHintMessages[2].in)}
	web := startGatewayWith(t, f)
	resp, body := post(t, web.URL+"/v1/jobs", `{"spec": {"command": ["x"], "gpus": 2, "gpu_fraction": 0.5}}`)
	o := object(t, body)
	if resp.StatusCode != 400 || o["message"] != coordinatorHintMessages[2].want || o["error"] != coordinatorHintMessages[2].want {
		t.Errorf("HTTP %d %s", resp.StatusCode, body)
	}
}
