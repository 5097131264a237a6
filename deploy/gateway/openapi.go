package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"trainctl/openapi"
)

// The REST API's description, GET /v1/openapi.json: what protoc-gen-swagger
// (grpc-gateway's generator, run by build.sh over the protos and
// trainctl_http.yaml, nothing committed) wrote, embedded in the binary, with
// what the gateway does beyond the generated proxy:
//   - its own routes (ownRoutes and /v1/openapi.json, tag "gateway");
//   - GetLogsResponse.data as text (marshal.go);
//   - the short state names of ?states= (routes.go).
// Each change checks that what it changes is there, so renaming a message or
// field in the protos fails the gateway's tests rather than serving a stale
// description.

const openAPIOperation = `{
	"summary": "This description (OpenAPI 2.0), generated from the protos and trainctl_http.yaml by protoc-gen-swagger at build time, plus the gateway's own routes.",
	"operationId": "OpenAPI", "tags": ["gateway"],
	"responses": {"200": {"description": "the OpenAPI 2.0 (Swagger) description", "schema": {"type": "object"}}}}`

// ownDefinitions: the schemas of the gateway's own routes.
const ownDefinitions = `{
	"gatewayHealth": {"type": "object", "properties": {
		"status": {"type": "string", "description": "ok (/healthz); ready or not ready (/readyz)"},
		"coordinator": {"type": "string", "description": "the coordinator's gRPC address (/readyz)"},
		"reason": {"type": "string", "description": "why the coordinator did not answer (/readyz, 503)"}}},
	"gatewaySweep": {"type": "object", "properties": {
		"sweep_id": {"type": "string"},
		"trials": {"type": "integer", "format": "int32", "description": "trials among the jobs looked through"},
		"by_state": {"type": "object", "additionalProperties": {"type": "integer", "format": "int32"},
			"description": "trials per job state (JOB_STATE_PENDING ... JOB_STATE_CANCELLED), zeros included"},
		"first_submit_time_ms": {"type": "string", "format": "int64"},
		"last_submit_time_ms": {"type": "string", "format": "int64"}}},
	"gatewaySweepList": {"type": "object", "properties": {
		"sweeps": {"type": "array", "items": {"$ref": "#/definitions/gatewaySweep"}, "description": "newest sweep first"},
		"jobs_scanned": {"type": "integer", "format": "int32", "description": "jobs looked through (trials and other jobs)"},
		"truncated": {"type": "boolean", "format": "boolean", "description": "more sweeps were found than limit, or the coordinator returned its most jobs (1000): older sweeps may be missing"}}}
}`

const textLogsDescription = "The log's bytes as UTF-8 text (the gateway decodes them; over gRPC this field is bytes): " +
	"invalid UTF-8 becomes U+FFFD, and a character cut at the end of a chunk that is not the log's end is left " +
	"for the next read (next_offset points at its first byte). GET .../logs:stream keeps base64."

// withOpenAPIRoute returns own plus GET /v1/openapi.json serving the
// description of everything (servedOpenAPI over openapi.Swagger).
func withOpenAPIRoute(own []ownRoute) ([]ownRoute, error) {
	all := append(append([]ownRoute{}, own...), ownRoute{Path: "/v1/openapi.json", Method: "GET", Operation: openAPIOperation})
	spec, err := servedOpenAPI(openapi.Swagger, all)
	if err != nil {
		return nil, err
	}
	all[len(all)-1].Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(spec)
	})
	return all, nil
}

// servedOpenAPI returns the generated description with the gateway's changes
// (see above) and own's operations. Errors: generated does not parse, lacks
// GetLogsResponse.data or a ?states= parameter, or already has a path of own.
func servedOpenAPI(generated []byte, own []ownRoute) ([]byte, error) {
	var spec map[string]interface{}
	if err := json.Unmarshal(generated, &spec); err != nil {
		return nil, fmt.Errorf("the generated OpenAPI description does not parse: %v", err)
	}
	paths, _ := spec["paths"].(map[string]interface{})
	defs, _ := spec["definitions"].(map[string]interface{})
	if paths == nil || defs == nil {
		return nil, fmt.Errorf("the generated OpenAPI description has no paths or definitions")
	}
	spec["info"] = map[string]interface{}{
		"title":   "trainctl REST API (trainctl-gateway)",
		"version": "v1",
		"description": "The user API of trainctl-coordinator (trainctl.v1.Coordinator) over HTTP/JSON. " +
			"JSON uses the proto field names and prints defaults; 64-bit integers are strings, enums their names. " +
			"Errors: an HTTP code with {\"error\", \"message\", \"code\" (the gRPC code)}; unknown fields of a request body are refused (400, naming the field). " +
			"Send `Authorization: Bearer <token>` to a coordinator run with --tokens-file.",
	}

	logs, _ := defs["v1GetLogsResponse"].(map[string]interface{})
	props, _ := logs["properties"].(map[string]interface{})
	if _, ok := props["data"]; !ok {
		return nil, fmt.Errorf("the generated OpenAPI description has no v1GetLogsResponse.data (renamed in service.proto? update openapi.go and marshal.go)")
	}
	props["data"] = map[string]interface{}{"type": "string", "description": textLogsDescription}

	states := 0
	for _, item := range paths {
		ops, _ := item.(map[string]interface{})
		for _, op := range ops {
			o, _ := op.(map[string]interface{})
			params, _ := o["parameters"].([]interface{})
			for _, p := range params {
				p, _ := p.(map[string]interface{})
				items, _ := p["items"].(map[string]interface{})
				enum, _ := items["enum"].([]interface{})
				if p["name"] != "states" || p["in"] != "query" || enum == nil {
					continue
				}
				for _, short := range strings.Split(shortStateNames, ", ") {
					enum = append(enum, short)
				}
				items["enum"] = enum
				desc, _ := p["description"].(string)
				p["description"] = strings.TrimSpace(desc + " Full names or short ones (" + shortStateNames +
					"), any case; repeat the parameter or separate names with commas.")
				states++
			}
		}
	}
	if states == 0 {
		return nil, fmt.Errorf("the generated OpenAPI description has no ?states= parameter (ListJobsRequest.states renamed? update routes.go and openapi.go)")
	}

	var extra map[string]interface{}
	if err := json.Unmarshal([]byte(ownDefinitions), &extra); err != nil {
		return nil, fmt.Errorf("ownDefinitions: %v", err)
	}
	for name, d := range extra {
		defs[name] = d
	}
	for _, r := range own {
		var op interface{}
		if err := json.Unmarshal([]byte(r.Operation), &op); err != nil {
			return nil, fmt.Errorf("operation of %s %s: %v", r.Method, r.Path, err)
		}
		item, _ := paths[r.Path].(map[string]interface{})
		if item == nil {
			item = map[string]interface{}{}
			paths[r.Path] = item
		}
		m := strings.ToLower(r.Method)
		if _, dup := item[m]; dup {
			return nil, fmt.Errorf("%s %s is both a trainctl_http.yaml rule and a route of the gateway", r.Method, r.Path)
		}
		item[m] = op
	}
	return marshalNoHTMLEscape(spec)
}
