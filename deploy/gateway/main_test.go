// Tests of the gateway's own behaviour against an echo coordinator (a gRPC
// server in this process that answers with what it received): the caller's
// Authorization header reaches the coordinator as `authorization` metadata,
// a server stream becomes newline-delimited JSON, errors become HTTP codes,
// and -static-dir serves the dashboard. The real coordinator is tested
// through the gateway in tests/e2e/gateway_e2e.sh and web_e2e.sh.
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
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "trainctl/v1"
)

// echoCoordinator: ListNodes answers one node named after the request's
// `authorization` metadata; StreamLogs sends two chunks, or NOT_FOUND for
// job 404.
type echoCoordinator struct {
	pb.UnimplementedCoordinatorServer
}

func (echoCoordinator) ListNodes(ctx context.Context, _ *pb.ListNodesRequest) (*pb.ListNodesResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	name := "no authorization metadata"
	if v := md.Get("authorization"); len(v) > 0 {
		name = v[0]
	}
	return &pb.ListNodesResponse{Nodes: []*pb.NodeView{{Node: &pb.Node{Name: name}}}}, nil
}

func (echoCoordinator) StreamLogs(req *pb.StreamLogsRequest, s pb.Coordinator_StreamLogsServer) error {
	if req.JobId == 404 {
		return status.Error(codes.NotFound, "job 404 not found")
	}
	for i, text := range []string{"step 1\n", "step 2\n"} {
		off := int64(7 * i)
		if err := s.Send(&pb.StreamLogsResponse{Data: []byte(text), Offset: off, NextOffset: off + 7, Eof: i == 1}); err != nil {
			return err
		}
	}
	return nil
}

func startGateway(t *testing.T, staticDir string) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterCoordinatorServer(srv, &echoCoordinator{})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h, err := newHandler(ctx, ln.Addr().String(), staticDir, []grpc.DialOption{grpc.WithInsecure()})
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(h)
	t.Cleanup(web.Close)
	return web
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
	if _, err := newHandler(context.Background(), "127.0.0.1:1", t.TempDir(), []grpc.DialOption{grpc.WithInsecure()}); err == nil {
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
