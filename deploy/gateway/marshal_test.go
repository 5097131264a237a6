// GET /v1/jobs/{job_id}/logs answers text; request bodies with unknown fields
// are refused (marshal.go).
package main

import (
	"strings"
	"testing"

	pb "trainctl/v1"
)

func TestGetLogs_Data_IsTextNotBase64(t *testing.T) {
	// 23 bytes ("é" is 2 of them).
	web := startGatewayWith(t, &fakeCoordinator{logs: &pb.GetLogsResponse{
		Data: []byte("héllo <rank 0> & done\n"), NextOffset: 23}})
	resp, body := get(t, web.URL+"/v1/jobs/7/logs?rank=0", "")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("HTTP %d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	// As written: no base64, no \u003c escapes.
	want := `{"data":"héllo <rank 0> & done\n","eof":false,"next_offset":"23","task":null}`
	if body != want {
		t.Errorf("body\n got %s\nwant %s", body, want)
	}
}

func TestGetLogs_InvalidUTF8_BecomesReplacementCharacter(t *testing.T) {
	web := startGatewayWith(t, &fakeCoordinator{logs: &pb.GetLogsResponse{
		Data: []byte("a\xffb\xc3(c"), NextOffset: 6, Eof: true}})
	_, body := get(t, web.URL+"/v1/jobs/7/logs", "")
	if got := object(t, body)["data"]; got != "a\uFFFDb\uFFFD(c" {
		t.Errorf("data %q, want %q (body %s)", got, "a\uFFFDb\uFFFD(c", body)
	}
}

func TestGetLogs_CharacterCutAtChunkEnd_LeftForNextRead(t *testing.T) {
	// "ok ✓" is 6 bytes (✓ = e2 9c 93); the chunk [100, 105) ends 2 bytes
	// into the ✓. Not eof: the text ends before it, next_offset 103 points
	// at its first byte, so the next read starts with the whole character.
	f := &fakeCoordinator{logs: &pb.GetLogsResponse{Data: []byte("ok \xe2\x9c"), NextOffset: 105}}
	web := startGatewayWith(t, f)
	o := object(t, func() string { _, b := get(t, web.URL+"/v1/jobs/7/logs?offset=100", ""); return b }())
	if o["data"] != "ok " || o["next_offset"] != "103" || o["eof"] != false {
		t.Errorf("cut chunk: %v, want data %q next_offset 103", o, "ok ")
	}

	// At the log's end (eof) nothing more comes: the cut bytes are replaced,
	// next_offset is the coordinator's.
	f.mu.Lock()
	f.logs = &pb.GetLogsResponse{Data: []byte("ok \xe2\x9c"), NextOffset: 105, Eof: true}
	f.mu.Unlock()
	o = object(t, func() string { _, b := get(t, web.URL+"/v1/jobs/7/logs?offset=100", ""); return b }())
	if o["data"] != "ok \uFFFD" || o["next_offset"] != "105" || o["eof"] != true {
		t.Errorf("cut chunk at eof: %v", o)
	}

	// A chunk that is only the start of a character (max_bytes=2) is kept,
	// replaced: leaving it would return no data and the same offset forever.
	f.mu.Lock()
	f.logs = &pb.GetLogsResponse{Data: []byte("\xe2\x9c"), NextOffset: 105}
	f.mu.Unlock()
	o = object(t, func() string { _, b := get(t, web.URL+"/v1/jobs/7/logs?offset=103&max_bytes=2", ""); return b }())
	if o["data"] != "\uFFFD" || o["next_offset"] != "105" {
		t.Errorf("chunk of a cut character only: %v", o)
	}
}

func TestGetLogs_EmptyChunk_EmptyString(t *testing.T) {
	web := startGatewayWith(t, &fakeCoordinator{logs: &pb.GetLogsResponse{NextOffset: 9, Eof: true}})
	_, body := get(t, web.URL+"/v1/jobs/7/logs?offset=9", "")
	if body != `{"data":"","eof":true,"next_offset":"9","task":null}` {
		t.Errorf("body %s", body)
	}
}

func TestIncompleteRuneSuffix_Table(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{"", 0}, {"abc", 0}, {"é", 0}, {"a\xc3", 1}, {"✓", 0}, {"a\xe2", 1}, {"a\xe2\x9c", 2},
		{"\xf0\x9f\x98", 3}, {"\xf0\x9f\x98\x80", 0}, {"a\xff", 0}, {"a\x9c", 0}, {"a\x9c\x9c\x9c", 0},
	} {
		if got := incompleteRuneSuffix([]byte(c.in)); got != c.want {
			t.Errorf("incompleteRuneSuffix(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestSubmitJob_UnknownField_400NamingItsPath(t *testing.T) {
	f := &fakeCoordinator{}
	web := startGatewayWith(t, f)
	for _, c := range []struct{ body, field, in string }{
		{`{"spec": {"nmae": "typo", "command": ["true"]}}`, `"spec.nmae"`, "trainctl.v1.JobSpec"},
		{`{"sepc": {"command": ["true"]}}`, `"sepc"`, "trainctl.v1.SubmitJobRequest"},
		{`{"spec": {"command": ["true"], "early_stop": {"metric": "loss", "grace": 3}}}`, `"spec.early_stop.grace"`, "trainctl.v1.EarlyStop"},
	} {
		resp, body := post(t, web.URL+"/v1/jobs", c.body)
		o := object(t, body)
		msg, _ := o["message"].(string)
		if resp.StatusCode != 400 || o["code"] != float64(3) || !strings.Contains(msg, "unknown field "+c.field) ||
			!strings.Contains(msg, c.in) {
			t.Errorf("POST %s: HTTP %d %s; want 400 naming %s in %s", c.body, resp.StatusCode, body, c.field, c.in)
		}
	}
	if len(f.submits) != 0 {
		t.Errorf("the coordinator got %d submits of refused bodies", len(f.submits))
	}
}

func TestSubmitJobs_Batch_OneCallIdsInOrder(t *testing.T) {
	f := &fakeCoordinator{}
	web := startGatewayWith(t, f)
	resp, body := post(t, web.URL+"/v1/jobs:batch",
		`{"specs": [{"command": ["a"], "array": {"task_id": 0, "task_count": 2, "max_running": 1}},
		            {"command": ["b"], "array": {"task_id": 1, "task_count": 2, "max_running": 1}}],
		  "request_id": "r-2"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("HTTP %d: %s", resp.StatusCode, body)
	}
	ids, _ := object(t, body)["job_ids"].([]interface{})
	if len(ids) != 2 || ids[0] != "10" || ids[1] != "11" {
		t.Errorf("job_ids: %s", body)
	}
	if len(f.batches) != 1 || len(f.batches[0].Specs) != 2 || f.batches[0].Specs[1].Array.TaskId != 1 ||
		f.batches[0].RequestId != "r-2" {
		t.Errorf("coordinator got %v", f.batches)
	}
}

func TestSubmitJobArray_OneSpecAndTaskIds_IdsInOrder(t *testing.T) {
	f := &fakeCoordinator{}
	web := startGatewayWith(t, f)
	resp, body := post(t, web.URL+"/v1/jobs:array",
		`{"spec": {"command": ["eval"], "exported_env": {"VIRTUAL_ENV": "/v"}},
		  "task_ids": [0, 5, 7], "max_running": 2, "request_id": "r-3"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("HTTP %d: %s", resp.StatusCode, body)
	}
	ids, _ := object(t, body)["job_ids"].([]interface{})
	if len(ids) != 3 || ids[0] != "20" || ids[2] != "22" {
		t.Errorf("job_ids: %s", body)
	}
	if len(f.arrays) != 1 || len(f.arrays[0].TaskIds) != 3 || f.arrays[0].TaskIds[1] != 5 ||
		f.arrays[0].MaxRunning != 2 || f.arrays[0].Spec.ExportedEnv["VIRTUAL_ENV"] != "/v" ||
		f.arrays[0].RequestId != "r-3" {
		t.Errorf("coordinator got %v", f.arrays)
	}
}

func TestSubmitJob_KnownFields_ProtoAndCamelNamesAccepted(t *testing.T) {
	f := &fakeCoordinator{}
	web := startGatewayWith(t, f)
	resp, body := post(t, web.URL+"/v1/jobs",
		`{"spec": {"name": "ok", "command": ["true"], "gpuFraction": 0.5, "env": {"A": "1"},
		  "placement": "GANG_PLACEMENT_UNSPECIFIED"}, "request_id": "r-1"}`)
	if resp.StatusCode != 200 || object(t, body)["job_id"] != "1" {
		t.Fatalf("HTTP %d: %s", resp.StatusCode, body)
	}
	if len(f.submits) != 1 {
		t.Fatalf("%d submits", len(f.submits))
	}
	got := f.submits[0]
	if got.Spec.Name != "ok" || got.Spec.GpuFraction != 0.5 || got.Spec.Env["A"] != "1" || got.RequestId != "r-1" {
		t.Errorf("coordinator got %v", got)
	}
	// An empty body is an empty request, as grpc-gateway has it.
	if resp, body := post(t, web.URL+"/v1/jobs", ""); resp.StatusCode != 200 {
		t.Errorf("empty body: HTTP %d: %s", resp.StatusCode, body)
	}
	if resp, body := post(t, web.URL+"/v1/jobs", `{"spec": `); resp.StatusCode != 400 {
		t.Errorf("broken JSON: HTTP %d: %s", resp.StatusCode, body)
	}
}
