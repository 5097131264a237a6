package main

import "net/http"

// ownRoute is a path the gateway answers itself rather than through a rule
// of trainctl_http.yaml, with its OpenAPI operation (openapi.go adds it to
// the generated description, so this table is the one list of them).
type ownRoute struct {
	Path    string
	Method  string // GET routes also answer HEAD
	Handler http.Handler
	// OpenAPI (Swagger 2.0) operation object, JSON.
	Operation string
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
