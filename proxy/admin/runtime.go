package admin

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/logging"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy"
)

// ConfigState is the configuration a proxy runs with: the one it started
// with, the one the last successful reload installed, and that reload's
// outcome.
type ConfigState struct {
	Started, Current *policy.Config
	PolicyVersion    uint64
	LastReloadError  error
}

// ConfigView is GET /config's answer.
type ConfigView struct {
	File            string `json:"file"`
	PolicyVersion   uint64 `json:"policy_version"`
	LastReloadError string `json:"last_reload_error,omitempty"`
	// FileError: the file, read again for this answer, does not load;
	// nothing is marked pending then.
	FileError      string           `json:"file_error,omitempty"`
	PendingRestart []string         `json:"pending_restart"`
	PendingReload  []string         `json:"pending_reload"`
	Settings       []policy.Setting `json:"settings"`
}

// view reads the config file again and compares it with what runs.
func (h *Handler) view() ConfigView {
	cs := h.Config()
	v := ConfigView{File: cs.Current.Path, PolicyVersion: cs.PolicyVersion, PendingRestart: []string{}, PendingReload: []string{}}
	if cs.LastReloadError != nil {
		v.LastReloadError = cs.LastReloadError.Error()
	}
	disk, err := policy.Load(cs.Current.Path)
	if err != nil {
		v.FileError = err.Error()
		disk = nil
	}
	v.Settings = policy.Running(cs.Started, cs.Current, disk)
	for _, s := range v.Settings {
		switch s.Pending {
		case "restart":
			v.PendingRestart = append(v.PendingRestart, s.Key)
		case "reload":
			v.PendingReload = append(v.PendingReload, s.Key)
		}
	}
	return v
}

// config answers GET /config: every key's running value, secrets
// redacted, each marked where the file on disk (read again now) differs,
// with what would apply the file's value (reload or restart).
func (h *Handler) config(w http.ResponseWriter, r *http.Request) {
	if !knownParams(w, r.URL.Query()) {
		return
	}
	writeJSON(w, h.view())
}

// Status is GET /status's answer.
type Status struct {
	Version       string            `json:"version,omitempty"`
	Instance      string            `json:"instance,omitempty"`
	StartedAt     *time.Time        `json:"started_at,omitempty"`
	UptimeSeconds float64           `json:"uptime_seconds,omitempty"`
	Connections   int               `json:"connections"`
	Draining      bool              `json:"draining"`
	Pause         *proxy.PauseState `json:"pause,omitempty"`
	Config        *ConfigView       `json:"config,omitempty"`
}

func (h *Handler) status(w http.ResponseWriter, r *http.Request) {
	if !knownParams(w, r.URL.Query()) {
		return
	}
	st := Status{Version: h.Version, Instance: h.Instance}
	if !h.Started.IsZero() {
		started := h.Started.UTC()
		st.StartedAt, st.UptimeSeconds = &started, logging.Seconds(time.Since(h.Started))
	}
	if h.Sessions != nil {
		st.Connections = len(h.Sessions.Connections())
	}
	st.Draining = h.Draining != nil && h.Draining()
	if h.Control != nil {
		ps := h.Control.PauseState()
		st.Pause = &ps
	}
	if h.Config != nil {
		v := h.view()
		v.Settings = nil // GET /config has them
		st.Config = &v
	}
	writeJSON(w, st)
}

// pause answers POST /pause[?hold=true][&timeout=60s]: stop accepting
// connections and, with hold, hold statements at transaction boundaries;
// with timeout the pause ends by itself.
func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !knownParams(w, q, "hold", "timeout") {
		return
	}
	var o proxy.PauseOptions
	if s := q.Get("hold"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			http.Error(w, "hold must be true or false", http.StatusBadRequest)
			return
		}
		o.Hold = b
	}
	if s := q.Get("timeout"); s != "" {
		d, err := policy.ParseDuration(s)
		if err != nil || d <= 0 {
			http.Error(w, "timeout must be a positive duration such as 30s or 5m", http.StatusBadRequest)
			return
		}
		o.Timeout = d
	}
	writeJSON(w, h.Control.Pause(o))
}

func (h *Handler) resume(w http.ResponseWriter, r *http.Request) {
	if !knownParams(w, r.URL.Query()) {
		return
	}
	writeJSON(w, h.Control.Resume())
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
