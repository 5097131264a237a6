// The gateway's own routes: /healthz, /readyz, /v1/sweeps, and the short
// state names of ?states= (routes.go).
package main

import (
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "trainctl/v1"
)

func TestHealthz_NoCoordinator_200(t *testing.T) {
	// Liveness asks the coordinator nothing: none listens on port 1.
	web := serveGateway(t, gatewayConfig{CoordinatorAddr: "127.0.0.1:1"})
	resp, body := get(t, web.URL+"/healthz", "")
	if resp.StatusCode != 200 || object(t, body)["status"] != "ok" {
		t.Errorf("HTTP %d %s", resp.StatusCode, body)
	}
	if resp, body := post(t, web.URL+"/healthz", "{}"); resp.StatusCode != 405 || object(t, body)["code"] != float64(12) {
		t.Errorf("POST /healthz: HTTP %d %s", resp.StatusCode, body)
	}
}

func TestReadyz_CoordinatorAnswers_200(t *testing.T) {
	// GetJob(0) answers NOT_FOUND: an answer.
	web := startGatewayWith(t, &fakeCoordinator{})
	resp, body := get(t, web.URL+"/readyz", "")
	if resp.StatusCode != 200 || object(t, body)["status"] != "ready" {
		t.Errorf("HTTP %d %s", resp.StatusCode, body)
	}
}

func TestReadyz_CoordinatorWantsToken_200(t *testing.T) {
	// A coordinator with --tokens-file refuses the probe (no token): it
	// answers, so it is ready.
	web := startGatewayWith(t, &fakeCoordinator{err: status.Error(codes.Unauthenticated, "no credentials")})
	if resp, body := get(t, web.URL+"/readyz", ""); resp.StatusCode != 200 {
		t.Errorf("HTTP %d %s", resp.StatusCode, body)
	}
}

func TestReadyz_NoCoordinator_503WithReason(t *testing.T) {
	web := serveGateway(t, gatewayConfig{CoordinatorAddr: "127.0.0.1:1"})
	resp, body := get(t, web.URL+"/readyz", "")
	o := object(t, body)
	reason, _ := o["reason"].(string)
	if resp.StatusCode != 503 || o["status"] != "not ready" || !strings.Contains(reason, "coordinator 127.0.0.1:1 did not answer") ||
		!strings.Contains(reason, "connection refused") {
		t.Errorf("HTTP %d %s", resp.StatusCode, body)
	}
}

func TestReadyz_CoordinatorStartsLate_ReadySoonAfter(t *testing.T) {
	// The gateway starts first (systemd starts both at boot) and fails to
	// dial for 6 s; once the coordinator listens, /readyz turns 200 within
	// 2 s. gRPC's default reconnect backoff would wait up to ~4 s more here
	// (1 s growing by 1.6x); the gateway caps it at 1 s.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	web := serveGateway(t, gatewayConfig{CoordinatorAddr: addr})
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if resp, body := get(t, web.URL+"/readyz", ""); resp.StatusCode != 503 {
			t.Fatalf("ready before the coordinator listens: HTTP %d %s", resp.StatusCode, body)
		}
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err)
	}
	srv := grpc.NewServer()
	pb.RegisterCoordinatorServer(srv, &fakeCoordinator{})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	listening := time.Now()
	for {
		resp, body := get(t, web.URL+"/readyz", "")
		if resp.StatusCode == 200 {
			break
		}
		if time.Since(listening) > 2*time.Second {
			t.Fatalf("not ready 2 s after the coordinator listens: HTTP %d %s", resp.StatusCode, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestReadyz_CoordinatorHangs_503AfterReadyTimeout(t *testing.T) {
	f := &fakeCoordinator{hang: true}
	web := serveGateway(t, gatewayConfig{CoordinatorAddr: startFake(t, f), ReadyTimeout: 200 * time.Millisecond})
	start := time.Now()
	resp, body := get(t, web.URL+"/readyz", "")
	if resp.StatusCode != 503 || !strings.Contains(object(t, body)["reason"].(string), "within 200ms") {
		t.Errorf("HTTP %d %s", resp.StatusCode, body)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("/readyz took %v with -ready-timeout 200ms", d)
	}
}

func TestListJobs_ShortStateNames_ReachCoordinatorAsFullNames(t *testing.T) {
	f := &fakeCoordinator{}
	web := startGatewayWith(t, f)
	for _, c := range []struct {
		query string
		want  []pb.JobState
	}{
		{"/v1/jobs?states=running", []pb.JobState{pb.JobState_JOB_STATE_RUNNING}},
		{"/v1/jobs?states=Running,pending&states=JOB_STATE_FAILED&limit=5",
			[]pb.JobState{pb.JobState_JOB_STATE_RUNNING, pb.JobState_JOB_STATE_PENDING, pb.JobState_JOB_STATE_FAILED}},
		{"/v1/jobs?states=job_state_cancelled", []pb.JobState{pb.JobState_JOB_STATE_CANCELLED}},
		{"/v1/jobs?states=4", []pb.JobState{pb.JobState_JOB_STATE_SUCCEEDED}},
		{"/v1/sweeps/s1/jobs?states=succeeded", []pb.JobState{pb.JobState_JOB_STATE_SUCCEEDED}},
		{"/v1/jobs", nil},
	} {
		f.mu.Lock()
		f.lists = nil
		f.mu.Unlock()
		if resp, body := get(t, web.URL+c.query, ""); resp.StatusCode != 200 {
			t.Errorf("GET %s: HTTP %d %s", c.query, resp.StatusCode, body)
			continue
		}
		if len(f.lists) != 1 || !reflect.DeepEqual(f.lists[0].States, c.want) {
			t.Errorf("GET %s: coordinator got %v, want states %v", c.query, f.lists, c.want)
		}
	}
	if f.lists[0].SweepId != "" {
		t.Errorf("sweep_id %q", f.lists[0].SweepId)
	}
}

func TestListJobs_UnknownStateName_400NamingIt(t *testing.T) {
	f := &fakeCoordinator{}
	web := startGatewayWith(t, f)
	resp, body := get(t, web.URL+"/v1/jobs?states=running,runing", "")
	msg, _ := object(t, body)["message"].(string)
	if resp.StatusCode != 400 || !strings.Contains(msg, `"runing"`) || !strings.Contains(msg, "pending, scheduled, running") {
		t.Errorf("HTTP %d %s", resp.StatusCode, body)
	}
	if len(f.lists) != 0 {
		t.Errorf("the coordinator was asked: %v", f.lists)
	}
}

func TestListSweeps_TrialsGroupedBySweep_NewestFirst(t *testing.T) {
	trial := func(id int64, sweep string, state pb.JobState, submit int64) *pb.Job {
		return &pb.Job{Id: id, State: state, SubmitTimeMs: submit, Spec: &pb.JobSpec{SweepId: sweep}}
	}
	// Newest first, as ListJobs answers: sweep b (jobs 5, 4), a plain job 3,
	// sweep a (jobs 2, 1).
	f := &fakeCoordinator{jobs: []*pb.Job{
		trial(5, "b", pb.JobState_JOB_STATE_RUNNING, 5000),
		trial(4, "b", pb.JobState_JOB_STATE_PENDING, 4000),
		trial(3, "", pb.JobState_JOB_STATE_SUCCEEDED, 3000),
		trial(2, "a", pb.JobState_JOB_STATE_FAILED, 2000),
		trial(1, "a", pb.JobState_JOB_STATE_SUCCEEDED, 1000),
	}}
	web := startGatewayWith(t, f)
	resp, body := get(t, web.URL+"/v1/sweeps", "Bearer tok-9")
	if resp.StatusCode != 200 {
		t.Fatalf("HTTP %d %s", resp.StatusCode, body)
	}
	want := `{"sweeps":[` +
		`{"sweep_id":"b","trials":2,"by_state":{"JOB_STATE_CANCELLED":0,"JOB_STATE_FAILED":0,"JOB_STATE_PENDING":1,"JOB_STATE_RUNNING":1,"JOB_STATE_SCHEDULED":0,"JOB_STATE_SUCCEEDED":0},"first_submit_time_ms":"4000","last_submit_time_ms":"5000"},` +
		`{"sweep_id":"a","trials":2,"by_state":{"JOB_STATE_CANCELLED":0,"JOB_STATE_FAILED":1,"JOB_STATE_PENDING":0,"JOB_STATE_RUNNING":0,"JOB_STATE_SCHEDULED":0,"JOB_STATE_SUCCEEDED":1},"first_submit_time_ms":"1000","last_submit_time_ms":"2000"}` +
		`],"jobs_scanned":5,"truncated":false}` + "\n"
	if body != want {
		t.Errorf("body\n got %s\nwant %s", body, want)
	}
	// The caller's token went with ListJobs (a user sees their own sweeps).
	if len(f.authz) != 1 || f.authz[0] != "Bearer tok-9" || f.lists[0].Limit != 0 {
		t.Errorf("ListJobs calls %v with authorization %v", f.lists, f.authz)
	}

	// limit counts sweeps (what the call returns), not jobs: limit=1 is the
	// newest sweep, and says there are more; limit=2 is both, complete.
	_, body = get(t, web.URL+"/v1/sweeps?limit=1", "")
	o := object(t, body)
	if sweeps, _ := o["sweeps"].([]interface{}); len(sweeps) != 1 ||
		sweeps[0].(map[string]interface{})["sweep_id"] != "b" || o["truncated"] != true ||
		f.lists[1].Limit != 0 {
		t.Errorf("limit=1: %s (asked %v)", body, f.lists[1])
	}
	_, body = get(t, web.URL+"/v1/sweeps?limit=2", "")
	if o := object(t, body); len(o["sweeps"].([]interface{})) != 2 || o["truncated"] != false {
		t.Errorf("limit=2: %s", body)
	}
}

func TestListSweeps_NoSweeps_EmptyList(t *testing.T) {
	web := startGatewayWith(t, &fakeCoordinator{})
	if _, body := get(t, web.URL+"/v1/sweeps", ""); body != `{"sweeps":[],"jobs_scanned":0,"truncated":false}`+"\n" {
		t.Errorf("body %s", body)
	}
}

func TestListSweeps_BadQueryOrMethod_Refused(t *testing.T) {
	f := &fakeCoordinator{}
	web := startGatewayWith(t, f)
	for _, q := range []string{"?limt=5", "?limit=-1", "?limit=many"} {
		resp, body := get(t, web.URL+"/v1/sweeps"+q, "")
		if resp.StatusCode != 400 || object(t, body)["code"] != float64(3) {
			t.Errorf("GET /v1/sweeps%s: HTTP %d %s", q, resp.StatusCode, body)
		}
	}
	if resp, _ := post(t, web.URL+"/v1/sweeps", "{}"); resp.StatusCode != 405 {
		t.Errorf("POST /v1/sweeps: HTTP %d", resp.StatusCode)
	}
	if len(f.lists) != 0 {
		t.Errorf("the coordinator was asked: %v", f.lists)
	}
}

// proto3 cannot tell an explicit 0 from an absent size: the gateway refuses
// `"gpuFraction": 0` (a whole GPU at the coordinator) and the like, naming
// the field, and passes specs without them.
func TestRefuseZeroSizes_ExplicitZero400NamingTheField(t *testing.T) {
	f := &fakeCoordinator{}
	web := serveGateway(t, gatewayConfig{CoordinatorAddr: startFake(t, f)})
	for body, field := range map[string]string{
		`{"spec": {"command": ["true"], "gpuFraction": 0}}`:        "spec.gpu_fraction",
		`{"spec": {"command": ["true"], "gpu_memory_bytes": "0"}}`: "spec.gpu_memory_bytes",
		`{"spec": {"command": ["true"], "cpus": 0.0}}`:             "spec.cpus",
	} {
		resp, got := post(t, web.URL+"/v1/jobs", body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(got, field+": must be more than 0") {
			t.Errorf("POST /v1/jobs %s: %d %s", body, resp.StatusCode, got)
		}
	}
	resp, got := post(t, web.URL+"/v1/jobs:batch", `{"specs": [{"command": ["a"]}, {"command": ["b"], "memoryBytes": "0"}]}`)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(got, "specs[1].memory_bytes") {
		t.Errorf("POST /v1/jobs:batch: %d %s", resp.StatusCode, got)
	}
	if f.submitted() != 0 {
		t.Fatalf("the coordinator was called %d times", f.submitted())
	}
	if resp, got := post(t, web.URL+"/v1/jobs", `{"spec": {"command": ["true"], "gpuFraction": 0.5}}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("a 0.5 fraction: %d %s", resp.StatusCode, got)
	}
}
