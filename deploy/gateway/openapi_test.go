// The OpenAPI description: generated at build time, its paths are the rules
// of trainctl_http.yaml; served at /v1/openapi.json with the gateway's own
// routes (openapi.go).
package main

import (
	"bytes"
	"encoding/json"
	"io/ioutil"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/ghodss/yaml"
	"github.com/golang/protobuf/jsonpb"
	"google.golang.org/genproto/googleapis/api/annotations"

	"trainctl/openapi"
)

// httpRuleRoutes reads trainctl_http.yaml as protoc-gen-grpc-gateway does
// (YAML -> JSON -> google.api.Http) and returns its routes, "GET /v1/jobs",
// additional bindings included.
func httpRuleRoutes(t *testing.T) []string {
	t.Helper()
	y, err := ioutil.ReadFile("trainctl_http.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		t.Fatal(err)
	}
	var service struct {
		HTTP json.RawMessage `json:"http"`
	}
	if err := json.Unmarshal(j, &service); err != nil {
		t.Fatal(err)
	}
	var rules annotations.Http
	if err := jsonpb.Unmarshal(bytes.NewReader(service.HTTP), &rules); err != nil {
		t.Fatalf("trainctl_http.yaml http: %v", err)
	}
	var routes []string
	var add func(r *annotations.HttpRule)
	add = func(r *annotations.HttpRule) {
		switch p := r.Pattern.(type) {
		case *annotations.HttpRule_Get:
			routes = append(routes, "GET "+p.Get)
		case *annotations.HttpRule_Post:
			routes = append(routes, "POST "+p.Post)
		case *annotations.HttpRule_Put:
			routes = append(routes, "PUT "+p.Put)
		case *annotations.HttpRule_Delete:
			routes = append(routes, "DELETE "+p.Delete)
		case *annotations.HttpRule_Patch:
			routes = append(routes, "PATCH "+p.Patch)
		default:
			t.Errorf("rule %s: unsupported pattern %T", r.Selector, p)
		}
		for _, b := range r.AdditionalBindings {
			add(b)
		}
	}
	for _, r := range rules.Rules {
		add(r)
	}
	sort.Strings(routes)
	return routes
}

// specRoutes returns the routes of an OpenAPI description: "GET /v1/jobs".
func specRoutes(t *testing.T, spec []byte) []string {
	t.Helper()
	var s struct {
		Swagger string                                `json:"swagger"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(spec, &s); err != nil || s.Swagger != "2.0" {
		t.Fatalf("not an OpenAPI 2.0 description (swagger %q): %v", s.Swagger, err)
	}
	var routes []string
	for path, ops := range s.Paths {
		for m := range ops {
			routes = append(routes, strings.ToUpper(m)+" "+path)
		}
	}
	sort.Strings(routes)
	return routes
}

func TestOpenAPI_GeneratedPaths_MatchHTTPRules(t *testing.T) {
	rules := httpRuleRoutes(t)
	if len(rules) < 12 {
		t.Fatalf("trainctl_http.yaml: only %d routes: %v", len(rules), rules)
	}
	if got := specRoutes(t, openapi.Swagger); strings.Join(got, "\n") != strings.Join(rules, "\n") {
		t.Errorf("the generated description's routes differ from trainctl_http.yaml's\n spec: %v\nrules: %v", got, rules)
	}
}

func TestOpenAPI_Served_RulesPlusGatewayRoutes(t *testing.T) {
	web := startGatewayWith(t, &fakeCoordinator{})
	resp, body := get(t, web.URL+"/v1/openapi.json", "")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("HTTP %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	want := httpRuleRoutes(t)
	for _, r := range []string{"GET /healthz", "GET /readyz", "GET /v1/sweeps", "GET /v1/terminal", "GET /v1/openapi.json"} {
		want = append(want, r)
	}
	sort.Strings(want)
	if got := specRoutes(t, []byte(body)); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("served routes\n got %v\nwant %v", got, want)
	}
	// Each gateway route is served (not the /v1/ proxy's 404).
	for _, p := range []string{"/healthz", "/readyz", "/v1/sweeps", "/v1/openapi.json"} {
		if resp, body := get(t, web.URL+p, ""); resp.StatusCode != 200 {
			t.Errorf("GET %s: HTTP %d %s", p, resp.StatusCode, body)
		}
	}
}

// servedSpec is the part of /v1/openapi.json these tests read.
type servedSpec struct {
	Info        map[string]string `json:"info"`
	Definitions map[string]struct {
		Properties map[string]map[string]interface{} `json:"properties"`
	} `json:"definitions"`
	Paths map[string]map[string]struct {
		Parameters []struct {
			Name  string `json:"name"`
			Items struct {
				Enum []string `json:"enum"`
			} `json:"items"`
		} `json:"parameters"`
	} `json:"paths"`
}

func getServedSpec(t *testing.T) servedSpec {
	t.Helper()
	web := startGatewayWith(t, &fakeCoordinator{})
	_, body := get(t, web.URL+"/v1/openapi.json", "")
	var s servedSpec
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Info["title"], "trainctl") {
		t.Errorf("info %v", s.Info)
	}
	return s
}

func TestOpenAPI_Served_DescribesTextLogs(t *testing.T) {
	data := getServedSpec(t).Definitions["v1GetLogsResponse"].Properties["data"]
	if data["type"] != "string" || data["format"] != nil || !strings.Contains(data["description"].(string), "UTF-8 text") {
		t.Errorf("GetLogsResponse.data: %v", data)
	}
}

func TestOpenAPI_Served_ListsShortStateNames(t *testing.T) {
	s := getServedSpec(t)
	for _, path := range []string{"/v1/jobs", "/v1/sweeps/{sweep_id}/jobs"} {
		found := false
		for _, p := range s.Paths[path]["get"].Parameters {
			if p.Name == "states" {
				enum := " " + strings.Join(p.Items.Enum, " ") + " "
				found = strings.Contains(enum, " JOB_STATE_RUNNING ") && strings.Contains(enum, " running ")
			}
		}
		if !found {
			t.Errorf("GET %s: states does not list the short names", path)
		}
	}
}

func TestOpenAPI_Served_EveryRefResolves(t *testing.T) {
	web := startGatewayWith(t, &fakeCoordinator{})
	_, body := get(t, web.URL+"/v1/openapi.json", "")
	var s struct {
		Definitions map[string]json.RawMessage `json:"definitions"`
	}
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`"\$ref":\s*"#/definitions/([^"]+)"`).FindAllStringSubmatch(body, -1)
	if len(refs) < 20 {
		t.Fatalf("only %d $refs", len(refs))
	}
	for _, r := range refs {
		if _, ok := s.Definitions[r[1]]; !ok {
			t.Errorf("$ref to missing definition %s", r[1])
		}
	}
}

func TestServedOpenAPI_GatewayRouteOnARulePath_Error(t *testing.T) {
	clash := []ownRoute{{Path: "/v1/nodes", Method: "GET", Operation: `{}`}}
	if _, err := servedOpenAPI(openapi.Swagger, clash); err == nil || !strings.Contains(err.Error(), "GET /v1/nodes") {
		t.Errorf("servedOpenAPI with GET /v1/nodes twice: %v", err)
	}
	if _, err := servedOpenAPI([]byte("{"), nil); err == nil {
		t.Errorf("servedOpenAPI of broken JSON: no error")
	}
}

func TestServedOpenAPI_NoGetLogsData_Error(t *testing.T) {
	// GetLogsResponse.data renamed in service.proto: an error, not a
	// description that says text where there is none.
	var spec map[string]interface{}
	if err := json.Unmarshal(openapi.Swagger, &spec); err != nil {
		t.Fatal(err)
	}
	delete(spec["definitions"].(map[string]interface{}), "v1GetLogsResponse")
	renamed, _ := json.Marshal(spec)
	if _, err := servedOpenAPI(renamed, nil); err == nil || !strings.Contains(err.Error(), "v1GetLogsResponse") {
		t.Errorf("servedOpenAPI without v1GetLogsResponse: %v", err)
	}
}
