package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "trainctl/v1"
)

// ownRoute is a path the gateway answers itself rather than through a rule
// of trainctl_http.yaml, with its OpenAPI operation (openapi.go adds it to
// the generated description, so this table is the one list of them).
type ownRoute struct {
	Path    string
	Method  string // GET routes also answer HEAD
	Handler http.Handler
	// OpenAPI (Swagger 2.0) operation object, JSON; "#/definitions/X"
	// references resolve to ownDefinitions.
	Operation string
}

// ownRoutes returns /healthz, /readyz, /v1/sweeps and /v1/terminal
// (terminal.go; withOpenAPIRoute adds
// /v1/openapi.json, whose description includes these).
func ownRoutes(gw *runtime.ServeMux, client pb.CoordinatorClient, cfg gatewayConfig) []ownRoute {
	return []ownRoute{
		{"/healthz", "GET", http.HandlerFunc(healthz), `{
			"summary": "The gateway process is up (liveness); asks the coordinator nothing.",
			"operationId": "Healthz", "tags": ["gateway"],
			"responses": {"200": {"description": "up", "schema": {"$ref": "#/definitions/gatewayHealth"}}}}`},
		{"/readyz", "GET", readyz(client, cfg), `{
			"summary": "The coordinator answers a cheap RPC (GetJob of job 0) within -ready-timeout (readiness). Any answer counts, an error status included; no answer (UNAVAILABLE, DEADLINE_EXCEEDED) is 503 with the reason.",
			"operationId": "Readyz", "tags": ["gateway"],
			"responses": {
				"200": {"description": "the coordinator answers", "schema": {"$ref": "#/definitions/gatewayHealth"}},
				"503": {"description": "the coordinator does not answer; reason says why", "schema": {"$ref": "#/definitions/gatewayHealth"}}}}`},
		{"/v1/sweeps", "GET", listSweeps(gw, client), `{
			"summary": "One entry per sweep, newest first: its trials by state; at most limit sweeps (0: all found). A view of ListJobs (there is no ListSweeps RPC), as ` + "`trainctl sweep list`" + ` is: it covers the coordinator's newest 1000 jobs; truncated says when there may be more sweeps. A sweep's trials: GET /v1/sweeps/{sweep_id}/jobs.",
			"operationId": "ListSweeps", "tags": ["gateway"],
			"parameters": [{"name": "limit", "in": "query", "required": false, "type": "integer", "format": "int32",
				"description": "At most this many sweeps, newest first; 0: every sweep among the jobs looked through."}],
			"responses": {"200": {"description": "the sweeps", "schema": {"$ref": "#/definitions/gatewaySweepList"}}}}`},
		{"/v1/terminal", "GET", terminal(client), terminalOperation},
	}
}

// onlyMethod answers other methods than method (and HEAD for GET) with a
// JSON 405.
func onlyMethod(method string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && !(method == "GET" && r.Method == "HEAD") {
			w.Header().Set("Allow", method)
			writeJSONError(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// healthz: 200 {"status": "ok"} while the process serves HTTP.
func healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz: 200 when the coordinator answers GetJob(0) within
// cfg.ReadyTimeout, whatever the answer (NOT_FOUND, or UNAUTHENTICATED from
// a coordinator with --tokens-file: the probe carries no token); 503 with
// the reason when the call fails in transport (UNAVAILABLE: not listening,
// a standby, TLS refused; DEADLINE_EXCEEDED).
func readyz(client pb.CoordinatorClient, cfg gatewayConfig) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), cfg.ReadyTimeout)
		defer cancel()
		_, err := client.GetJob(ctx, &pb.GetJobRequest{JobId: 0})
		code := status.Code(err)
		if err != nil && ctx.Err() != nil {
			// Our deadline passed: whatever code the call ended with (the
			// server's own handler may answer first with its context error,
			// which arrives as UNKNOWN), the coordinator did not answer in time.
			code = codes.DeadlineExceeded
		}
		switch code {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{
				"status":      "not ready",
				"coordinator": cfg.CoordinatorAddr,
				"reason": fmt.Sprintf("coordinator %s did not answer within %v: %s",
					cfg.CoordinatorAddr, cfg.ReadyTimeout, status.Convert(err).Message()),
			})
		default:
			writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "coordinator": cfg.CoordinatorAddr})
		}
	}
}

// sweepSummary is one entry of GET /v1/sweeps (JSON as the proto messages
// print: 64-bit integers as strings).
type sweepSummary struct {
	SweepID string `json:"sweep_id"`
	Trials  int    `json:"trials"`
	// Trials per state, every state named (JOB_STATE_PENDING...), zeros too.
	ByState           map[string]int `json:"by_state"`
	FirstSubmitTimeMs int64          `json:"first_submit_time_ms,string"`
	LastSubmitTimeMs  int64          `json:"last_submit_time_ms,string"`
}

type sweepList struct {
	Sweeps []*sweepSummary `json:"sweeps"`
	// Jobs looked through (trials and plain jobs).
	JobsScanned int `json:"jobs_scanned"`
	// True when more sweeps were found than limit, or the coordinator
	// returned as many jobs as it returns at most: older sweeps may be
	// missing.
	Truncated bool `json:"truncated"`
}

// coordinatorListLimit: what ListJobs's limit 0 means (service.proto).
const coordinatorListLimit = 1000

// listSweeps: GET /v1/sweeps[?limit=N], the per-sweep view of ListJobs that
// `trainctl sweep list` prints (client/cli_sweep.cc): at most N sweeps (0:
// every sweep among the coordinator's newest jobs); limit counts sweeps, what
// the call returns, not the jobs scanned. The caller's Authorization goes
// with the call, so a user sees their own sweeps.
func listSweeps(gw *runtime.ServeMux, client pb.CoordinatorClient) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, outbound := runtime.MarshalerForRequest(gw, r)
		fail := func(err error) { runtime.HTTPError(r.Context(), gw, outbound, w, r, err) }
		// The coordinator's default: its newest coordinatorListLimit jobs.
		req := &pb.ListJobsRequest{}
		sweepLimit := 0
		for k, v := range r.URL.Query() {
			if k != "limit" {
				fail(status.Errorf(codes.InvalidArgument, "unknown query parameter %q (GET /v1/sweeps takes limit)", k))
				return
			}
			n, err := strconv.ParseInt(v[len(v)-1], 10, 32)
			if err != nil || n < 0 {
				fail(status.Errorf(codes.InvalidArgument, "limit: expected a count >= 0, got %q", v[len(v)-1]))
				return
			}
			sweepLimit = int(n)
		}
		ctx, err := runtime.AnnotateContext(r.Context(), gw, r)
		if err != nil {
			fail(err)
			return
		}
		resp, err := client.ListJobs(ctx, req)
		if err != nil {
			fail(err)
			return
		}
		writeJSON(w, http.StatusOK, summarizeSweeps(resp.Jobs, sweepLimit))
	}
}

// summarizeSweeps groups jobs (newest first, as ListJobs with its default
// limit answered) by sweep, newest sweep first, and keeps the first
// sweepLimit sweeps (0: all).
func summarizeSweeps(jobs []*pb.Job, sweepLimit int) *sweepList {
	out := &sweepList{Sweeps: []*sweepSummary{}, JobsScanned: len(jobs)}
	out.Truncated = len(jobs) >= coordinatorListLimit
	byID := map[string]*sweepSummary{}
	for _, j := range jobs {
		id := j.GetSpec().GetSweepId()
		if id == "" {
			continue
		}
		s := byID[id]
		if s == nil {
			s = &sweepSummary{SweepID: id, ByState: map[string]int{}}
			for v, name := range pb.JobState_name {
				if v != int32(pb.JobState_JOB_STATE_UNSPECIFIED) {
					s.ByState[name] = 0
				}
			}
			byID[id] = s
			out.Sweeps = append(out.Sweeps, s)
		}
		s.Trials++
		s.ByState[j.State.String()]++
		if t := j.SubmitTimeMs; s.FirstSubmitTimeMs == 0 || t < s.FirstSubmitTimeMs {
			s.FirstSubmitTimeMs = t
		}
		if j.SubmitTimeMs > s.LastSubmitTimeMs {
			s.LastSubmitTimeMs = j.SubmitTimeMs
		}
	}
	if sweepLimit > 0 && len(out.Sweeps) > sweepLimit {
		out.Sweeps = out.Sweeps[:sweepLimit]
		out.Truncated = true
	}
	return out
}

// stateFilterPath: the routes of ListJobs, whose ?states= takes JobState
// names.
var stateFilterPath = regexp.MustCompile(`^/v1/(jobs|sweeps/[^/]+/jobs)$`)

// shortStateNames lists the short names accepted (for the error message).
var shortStateNames = "pending, scheduled, running, succeeded, failed, cancelled"

// jobStateName returns the JobState name for s: a full name
// (JOB_STATE_RUNNING) or a short one (running), in any case; a number is
// returned as it is (grpc-gateway takes enum numbers). ok is false for
// anything else.
func jobStateName(s string) (string, bool) {
	if _, err := strconv.Atoi(s); err == nil {
		return s, true
	}
	up := strings.ToUpper(s)
	if _, ok := pb.JobState_value[up]; ok {
		return up, true
	}
	if _, ok := pb.JobState_value["JOB_STATE_"+up]; ok && up != "" {
		return "JOB_STATE_" + up, true
	}
	return "", false
}

// acceptStateNames lets ?states= of GET /v1/jobs and
// /v1/sweeps/{sweep_id}/jobs take short, case-insensitive state names and
// comma-separated lists (states=running,pending), rewriting them to the full
// names grpc-gateway knows (it takes only JOB_STATE_RUNNING); an unknown
// name is a 400 naming it.
func acceptStateNames(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "GET" || !stateFilterPath.MatchString(r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		q := r.URL.Query()
		given, ok := q["states"]
		if !ok {
			h.ServeHTTP(w, r)
			return
		}
		var names []string
		for _, v := range given {
			for _, s := range strings.Split(v, ",") {
				s = strings.TrimSpace(s)
				if s == "" {
					continue
				}
				name, ok := jobStateName(s)
				if !ok {
					writeJSONError(w, fmt.Sprintf("states: unknown job state %q; use %s (any case), or the full names such as JOB_STATE_RUNNING",
						s, shortStateNames), http.StatusBadRequest)
					return
				}
				names = append(names, name)
			}
		}
		q["states"] = names
		r2 := r.Clone(r.Context())
		r2.URL.RawQuery = q.Encode()
		h.ServeHTTP(w, r2)
	})
}

// sizeFields are JobSpec's size fields, by both JSON spellings: proto3
// cannot tell an explicit 0 from an absent field, so the coordinator would
// take `"gpuFraction": 0` as "no fraction" (a whole GPU) and `"cpus": 0` as
// "no limit". In the JSON the difference is still there: an explicit 0 is
// refused here, as the CLI and the SDK refuse it.
var sizeFields = map[string]string{
	"gpus": "gpus", "gpu_fraction": "gpu_fraction", "gpuFraction": "gpu_fraction",
	"gpu_memory_bytes": "gpu_memory_bytes", "gpuMemoryBytes": "gpu_memory_bytes",
	"nodes": "nodes", "gpus_per_node": "gpus_per_node", "gpusPerNode": "gpus_per_node",
	"cpus": "cpus", "memory_bytes": "memory_bytes", "memoryBytes": "memory_bytes",
}

// submitPaths are the REST submits whose bodies carry job specs.
var submitPaths = map[string]bool{"/v1/jobs": true, "/v1/jobs:batch": true, "/v1/jobs:array": true}

// zeroSize returns "spec.FIELD" (or "specs[i].FIELD") of the first size
// field given as 0 in a submit body, "" when none is (or the body is not a
// JSON object: the coordinator's parser then says what is wrong).
func zeroSize(body []byte) string {
	var req map[string]json.RawMessage
	if json.Unmarshal(body, &req) != nil {
		return ""
	}
	check := func(prefix string, raw json.RawMessage) string {
		var spec map[string]json.RawMessage
		if json.Unmarshal(raw, &spec) != nil {
			return ""
		}
		for key, field := range sizeFields {
			v, ok := spec[key]
			if !ok {
				continue
			}
			// A number, or a string for the int64 fields (proto3 JSON).
			s := strings.Trim(string(v), `"`)
			if f, err := strconv.ParseFloat(s, 64); err == nil && f == 0 {
				return prefix + "." + field
			}
		}
		return ""
	}
	if raw, ok := req["spec"]; ok {
		if f := check("spec", raw); f != "" {
			return f
		}
	}
	if raw, ok := req["specs"]; ok {
		var specs []json.RawMessage
		if json.Unmarshal(raw, &specs) == nil {
			for i, s := range specs {
				if f := check(fmt.Sprintf("specs[%d]", i), s); f != "" {
					return f
				}
			}
		}
	}
	return ""
}

// refuseZeroSizes answers a submit whose spec gives a size field as 0 with
// 400 INVALID_ARGUMENT naming the field and its range, before the
// coordinator could take it for "not given".
func refuseZeroSizes(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || !submitPaths[r.URL.Path] {
			h.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			writeJSONErrorCode(w, "request body: "+err.Error(), http.StatusRequestEntityTooLarge, codes.ResourceExhausted)
			return
		}
		if field := zeroSize(body); field != "" {
			writeJSONError(w, field+": must be more than 0 (leave it out for the default: one whole GPU, no limit)", http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	})
}
