package server

import (
	"crypto/subtle"
	"net/http"
	"strings"
)

// corsMaxAge is how long (seconds) a browser may cache a preflight's answer.
const corsMaxAge = "600"

// corsMethods are the methods the API answers.
const corsMethods = "GET, POST, OPTIONS"

// corsHeaders are the request headers allowed when a preflight names none:
// an API key travels in Authorization, and a wildcard would not cover it.
const corsHeaders = "Authorization, Content-Type"

// originAllowed reports whether a browser page from origin may call the API.
func (s *Server) originAllowed(origin string) bool {
	for _, o := range s.opts.CORSOrigins {
		if o == "*" || strings.EqualFold(o, origin) {
			return true
		}
	}
	return false
}

// cors sets the CORS response headers when the request comes from an
// allowed origin and reports whether it does. A request from any other
// origin gets none, so that the browser keeps the answer from the page.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) bool {
	if len(s.opts.CORSOrigins) == 0 {
		return false
	}
	h := w.Header()
	// The answer depends on Origin: caches must not hand one origin's
	// answer to another.
	h.Add("Vary", "Origin")
	origin := r.Header.Get("Origin")
	if origin == "" || !s.originAllowed(origin) {
		return false
	}
	h.Set("Access-Control-Allow-Origin", origin)
	return true
}

// isPreflight reports whether r is a CORS preflight: OPTIONS naming the
// method the real request will use.
func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
}

// preflight answers a CORS preflight with 204; the methods, headers and
// max age go only to an allowed origin. A preflight needs no API key:
// browsers never send credentials with it.
func (s *Server) preflight(w http.ResponseWriter, r *http.Request, allowed bool) {
	if allowed {
		h := w.Header()
		h.Set("Access-Control-Allow-Methods", corsMethods)
		// The official SDKs send headers of their own (x-stainless-…);
		// the ones the browser asks for are allowed.
		if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
			h.Set("Access-Control-Allow-Headers", req)
		} else {
			h.Set("Access-Control-Allow-Headers", corsHeaders)
		}
		h.Set("Access-Control-Max-Age", corsMaxAge)
	}
	w.WriteHeader(http.StatusNoContent)
}

// authorized reports whether r presents one of the API keys (always, when
// there are none), as "Authorization: Bearer KEY" (what the OpenAI and
// ollama clients send) or llama.cpp's "X-Api-Key: KEY".
func (s *Server) authorized(r *http.Request) bool {
	if len(s.opts.APIKeys) == 0 {
		return true
	}
	got := r.Header.Get("X-Api-Key")
	if a := r.Header.Get("Authorization"); a != "" {
		scheme, key, ok := strings.Cut(a, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return false
		}
		got = strings.TrimSpace(key)
	}
	if got == "" {
		return false
	}
	ok := 0
	for _, k := range s.opts.APIKeys {
		// Constant time, so that the answer's timing does not reveal how
		// much of a guess was right.
		ok |= subtle.ConstantTimeCompare([]byte(got), []byte(k))
	}
	return ok == 1
}

// unauthorized answers 401: in OpenAI's shape, or ollama's on its routes
// (whose clients read "error" as a string).
func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="grok"`)
	e := &apiError{status: http.StatusUnauthorized, Type: "invalid_request_error", Code: strPtr("invalid_api_key"),
		Message: "Invalid or missing API key: send it as the header `Authorization: Bearer KEY`."}
	if isOllamaPath(r.URL.Path) {
		writeOllamaError(w, e)
		return
	}
	writeError(w, e)
}

// isOllamaPath reports whether path is one of ollama's routes, whose
// errors are {"error": "message"}.
func isOllamaPath(path string) bool { return strings.HasPrefix(path, "/api/") }
