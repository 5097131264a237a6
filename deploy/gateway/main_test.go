// Tests of the gateway's own behaviour against a fake coordinator (a gRPC
// server in this process that records what it received and answers what the
// test set): the caller's Authorization header reaches the coordinator as
// `authorization` metadata, a server stream becomes newline-delimited JSON,
// errors become HTTP codes, and -static-dir serves the dashboard; each other
// foo_test.go tests foo.go. The real coordinator is tested through the
// gateway in tests/e2e/gateway_e2e.sh, security_e2e.sh and web_e2e.sh.
// Run: deploy/gateway/build.sh BUILD_DIR test
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io/ioutil"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "trainctl/v1"
)

// fakeCoordinator: ListNodes answers one node named after the request's
// `authorization` metadata; StreamLogs sends two chunks, NOT_FOUND for job
// 404 and err for job 401; GetLogs answers logs; SubmitJob and ListJobs
// record their requests and answer err or job 1 / jobs; GetJob answers
// NOT_FOUND, or err, or waits for the deadline when hang is set.
type fakeCoordinator struct {
	pb.UnimplementedCoordinatorServer

	mu      sync.Mutex
	logs    *pb.GetLogsResponse
	err     error // SubmitJob, ListNodes, GetJob, StreamLogs of job 401
	hang    bool
	jobs    []*pb.Job
	submits []*pb.SubmitJobRequest
	batches []*pb.SubmitJobsRequest
	arrays  []*pb.SubmitJobArrayRequest
	lists   []*pb.ListJobsRequest
	authz   []string          // authorization metadata of ListJobs calls
	opens   []*pb.SessionOpen // the first message of Session calls (terminal_test.go)
}

func authorization(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (f *fakeCoordinator) ListNodes(ctx context.Context, _ *pb.ListNodesRequest) (*pb.ListNodesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	name := authorization(ctx)
	if name == "" {
		name = "no authorization metadata"
	}
	return &pb.ListNodesResponse{Nodes: []*pb.NodeView{{Node: &pb.Node{Name: name}}}}, nil
}

func (f *fakeCoordinator) StreamLogs(req *pb.StreamLogsRequest, s pb.Coordinator_StreamLogsServer) error {
	switch req.JobId {
	case 404:
		return status.Error(codes.NotFound, "job 404 not found")
	case 401:
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.err
	}
	for i, text := range []string{"step 1\n", "step 2\n"} {
		off := int64(7 * i)
		if err := s.Send(&pb.StreamLogsResponse{Data: []byte(text), Offset: off, NextOffset: off + 7, Eof: i == 1}); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeCoordinator) GetLogs(context.Context, *pb.GetLogsRequest) (*pb.GetLogsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.logs, nil
}

func (f *fakeCoordinator) SubmitJob(_ context.Context, req *pb.SubmitJobRequest) (*pb.SubmitJobResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.submits = append(f.submits, req)
	if f.err != nil {
		return nil, f.err
	}
	return &pb.SubmitJobResponse{JobId: 1}, nil
}

func (f *fakeCoordinator) SubmitJobs(_ context.Context, req *pb.SubmitJobsRequest) (*pb.SubmitJobsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches = append(f.batches, req)
	if f.err != nil {
		return nil, f.err
	}
	resp := &pb.SubmitJobsResponse{}
	for i := range req.Specs {
		resp.JobIds = append(resp.JobIds, int64(10+i))
	}
	return resp, nil
}

func (f *fakeCoordinator) SubmitJobArray(_ context.Context, req *pb.SubmitJobArrayRequest) (*pb.SubmitJobsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.arrays = append(f.arrays, req)
	if f.err != nil {
		return nil, f.err
	}
	resp := &pb.SubmitJobsResponse{}
	for i := range req.TaskIds {
		resp.JobIds = append(resp.JobIds, int64(20+i))
	}
	return resp, nil
}

func (f *fakeCoordinator) ListJobs(ctx context.Context, req *pb.ListJobsRequest) (*pb.ListJobsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists = append(f.lists, req)
	f.authz = append(f.authz, authorization(ctx))
	return &pb.ListJobsResponse{Jobs: f.jobs}, nil
}

func (f *fakeCoordinator) GetJob(ctx context.Context, req *pb.GetJobRequest) (*pb.GetJobResponse, error) {
	f.mu.Lock()
	hang, err := f.hang, f.err
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if err != nil {
		return nil, err
	}
	return nil, status.Errorf(codes.NotFound, "job %d does not exist", req.JobId)
}

// startFake serves f on a free loopback port until the test ends; returns
// its address.
func startFake(t *testing.T, f *fakeCoordinator) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterCoordinatorServer(srv, f)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// serveGateway serves newHandler(cfg) (plaintext to the coordinator) until
// the test ends.
func serveGateway(t *testing.T, cfg gatewayConfig) *httptest.Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg.DialOptions = []grpc.DialOption{grpc.WithInsecure()}
	h, err := newHandler(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(h)
	t.Cleanup(web.Close)
	return web
}

// startGatewayWith: the gateway in front of f.
func startGatewayWith(t *testing.T, f *fakeCoordinator) *httptest.Server {
	t.Helper()
	return serveGateway(t, gatewayConfig{CoordinatorAddr: startFake(t, f)})
}

// startGateway: the gateway in front of an idle fake, serving staticDir.
func startGateway(t *testing.T, staticDir string) *httptest.Server {
	t.Helper()
	return serveGateway(t, gatewayConfig{CoordinatorAddr: startFake(t, &fakeCoordinator{}), StaticDir: staticDir})
}

func get(t *testing.T, url, auth string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := ioutil.ReadAll(resp.Body)
	return resp, string(body)
}

// post sends body (JSON) with method POST.
func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := ioutil.ReadAll(resp.Body)
	return resp, string(b)
}

// object parses body as a JSON object (failing the test otherwise).
func object(t *testing.T, body string) map[string]interface{} {
	t.Helper()
	var o map[string]interface{}
	if err := json.Unmarshal([]byte(body), &o); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, body)
	}
	return o
}

func TestAuthorizationHeader_ReachesCoordinatorAsMetadata(t *testing.T) {
	web := startGateway(t, "")
	_, body := get(t, web.URL+"/v1/nodes", "Bearer tok-123")
	var got struct {
		Nodes []struct{ Node struct{ Name string } }
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || len(got.Nodes) != 1 {
		t.Fatalf("GET /v1/nodes: %v %s", err, body)
	}
	if got.Nodes[0].Node.Name != "Bearer tok-123" {
		t.Errorf("coordinator saw authorization %q, want %q", got.Nodes[0].Node.Name, "Bearer tok-123")
	}
}

func TestStreamLogs_NewlineDelimitedJSON(t *testing.T) {
	web := startGateway(t, "")
	resp, body := get(t, web.URL+"/v1/jobs/7/logs:stream?follow=true", "")
	if resp.StatusCode != 200 {
		t.Fatalf("HTTP %d: %s", resp.StatusCode, body)
	}
	var lines []map[string]map[string]interface{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		var l map[string]map[string]interface{}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	if len(lines) != 2 || lines[0]["result"]["data"] != "c3RlcCAxCg==" || lines[1]["result"]["eof"] != true ||
		lines[1]["result"]["offset"] != "7" {
		t.Errorf("stream lines: %v", lines)
	}
}

func TestStreamLogs_UnknownJob_404WithJSONError(t *testing.T) {
	web := startGateway(t, "")
	resp, body := get(t, web.URL+"/v1/jobs/404/logs:stream", "")
	if resp.StatusCode != 404 || !strings.Contains(body, `"grpc_code":5`) || !strings.Contains(body, "job 404 not found") {
		t.Errorf("HTTP %d: %s", resp.StatusCode, body)
	}
}

func TestStaticDir_ServesDashboardOutsideV1(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "index.html"), []byte("<title>trainctl</title>"), 0o644); err != nil {
		t.Fatal(err)
	}
	web := startGateway(t, dir)
	resp, body := get(t, web.URL+"/", "")
	if resp.StatusCode != 200 || body != "<title>trainctl</title>" || resp.Header.Get("Cache-Control") != "no-cache" {
		t.Errorf("GET /: HTTP %d %q", resp.StatusCode, body)
	}
	if resp, _ := get(t, web.URL+"/v1/nodes", ""); resp.StatusCode != 200 {
		t.Errorf("GET /v1/nodes next to static files: HTTP %d", resp.StatusCode)
	}
	cfg := gatewayConfig{CoordinatorAddr: "127.0.0.1:1", StaticDir: t.TempDir(), DialOptions: []grpc.DialOption{grpc.WithInsecure()}}
	if _, err := newHandler(context.Background(), cfg); err == nil {
		t.Errorf("a -static-dir without index.html was accepted")
	}
}

func TestNoStaticDir_JSON404(t *testing.T) {
	web := startGateway(t, "")
	resp, body := get(t, web.URL+"/index.html", "")
	if resp.StatusCode != 404 || !strings.Contains(body, "under /v1/") {
		t.Errorf("HTTP %d: %s", resp.StatusCode, body)
	}
}

// A body over the limit is refused (413) before it is read, declared or not,
// and the coordinator is never called.
func TestLimitRequests_BodyOverLimit_413WithoutReadingIt(t *testing.T) {
	f := &fakeCoordinator{}
	web := serveGateway(t, gatewayConfig{CoordinatorAddr: startFake(t, f), MaxBodyBytes: 1024})
	big := `{"spec":{"command":["` + strings.Repeat("x", 4096) + `"]}}`
	resp, body := post(t, web.URL+"/v1/jobs", big)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "over the limit of 1024 bytes") {
		t.Fatalf("declared 4 KiB body: %d %s", resp.StatusCode, body)
	}
	// Chunked (no Content-Length): cut at the limit while reading.
	req, _ := http.NewRequest("POST", web.URL+"/v1/jobs", ioutil.NopCloser(strings.NewReader(big)))
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/json")
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode < 400 {
		t.Fatalf("chunked 4 KiB body: %d, want an error", resp2.StatusCode)
	}
	if f.submitted() != 0 {
		t.Fatalf("the coordinator was called %d times", f.submitted())
	}
}

// With -require-auth a request without credentials is refused (401) before
// its body is read; one with them goes through.
func TestLimitRequests_RequireAuth_401WithoutAuthorization(t *testing.T) {
	web := serveGateway(t, gatewayConfig{CoordinatorAddr: startFake(t, &fakeCoordinator{}), RequireAuth: true})
	resp, body := get(t, web.URL+"/v1/nodes", "")
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "Authorization: Bearer") {
		t.Fatalf("GET /v1/nodes without credentials: %d %s", resp.StatusCode, body)
	}
	if resp, body := get(t, web.URL+"/v1/nodes", "Bearer tok-1"); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/nodes with credentials: %d %s", resp.StatusCode, body)
	}
}

// submitted is the number of SubmitJob calls the fake saw.
func (f *fakeCoordinator) submitted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.submits)
}
