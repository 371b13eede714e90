package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus metrics, in a registry of its own so
// that several servers (tests) can live in one process.
//
// The token, step and slot figures are read from the engine's counters when
// /metrics is scraped, not counted again here: the engine counts each token
// as it is sampled, so rate(grok_generation_tokens_total[1m]) is the live
// decoding speed, streamed requests included.
type metrics struct {
	reg      *prometheus.Registry
	handler  http.Handler
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	ttft     prometheus.Histogram
	tpot     prometheus.Histogram
	finished *prometheus.CounterVec
}

// latencyBuckets span a fast small model (milliseconds) to a large one on
// a CPU (tens of seconds).
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "grok_http_requests_total", Help: "HTTP requests by endpoint and status code.",
	}, []string{"endpoint", "code"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "grok_http_request_duration_seconds", Help: "Time from a request's arrival to the end of its response, streams included.",
		Buckets: latencyBuckets,
	}, []string{"endpoint"})
	m.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "grok_time_to_first_token_seconds", Help: "Time from a generation request's arrival to its first sampled token (queueing and prefill).",
		Buckets: latencyBuckets,
	})
	m.tpot = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "grok_time_per_output_token_seconds", Help: "Mean time between a request's tokens after the first.",
		Buckets: latencyBuckets,
	})
	m.finished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "grok_requests_finished_total", Help: "Generation requests by finish reason (stop, length, cancelled, error).",
	}, []string{"finish_reason"})
	m.reg.MustRegister(m.requests, m.duration, m.ttft, m.tpot, m.finished, engineCollector{s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m
}

func (m *metrics) observeHTTP(endpoint string, code int, d time.Duration) {
	m.requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(endpoint).Observe(d.Seconds())
}

// engineCollector exports the engine's counters at scrape time.
type engineCollector struct{ s *Server }

var (
	descLoaded      = prometheus.NewDesc("grok_model_loaded", "1 once the model is loaded and the engine running.", nil, nil)
	descPromptTok   = prometheus.NewDesc("grok_prompt_tokens_total", "Prompt tokens prefilled.", nil, nil)
	descGenTok      = prometheus.NewDesc("grok_generation_tokens_total", "Tokens generated (rate() of it is the aggregate tokens/s).", nil, nil)
	descRequests    = prometheus.NewDesc("grok_engine_requests_total", "Requests submitted to the engine.", nil, nil)
	descRejected    = prometheus.NewDesc("grok_queue_rejected_total", "Requests refused with 503 because the queue was full.", nil, nil)
	descSteps       = prometheus.NewDesc("grok_engine_steps_total", "Batched forward passes.", nil, nil)
	descRows        = prometheus.NewDesc("grok_engine_batch_rows_total", "Sequences summed over forward passes: rate(rows)/rate(steps) is the mean batch size.", nil, nil)
	descForward     = prometheus.NewDesc("grok_engine_forward_seconds_total", "Time spent in the model's forward pass: its rate is the engine's busy fraction.", nil, nil)
	descQueue       = prometheus.NewDesc("grok_queue_depth", "Requests waiting for a slot.", nil, nil)
	descActive      = prometheus.NewDesc("grok_active_slots", "Slots running a request.", nil, nil)
	descSlots       = prometheus.NewDesc("grok_slots", "Slots (sequences that decode together in one batch).", nil, nil)
	descOccupancy   = prometheus.NewDesc("grok_batch_occupancy_ratio", "Active slots over slots, now.", nil, nil)
	descCachedTok   = prometheus.NewDesc("grok_prompt_cached_tokens_total", "Prompt tokens taken from the prefix cache instead of prefilled.", nil, nil)
	descPreempted   = prometheus.NewDesc("grok_engine_preempted_total", "Requests that gave their KV pages back to older ones, to be recomputed.", nil, nil)
	descKVPages     = prometheus.NewDesc("grok_kv_pages", "Pages of the KV memory's pool, by state: free, cached (held by the prefix cache), total.", []string{"state"}, nil)
	engineMetricSet = []*prometheus.Desc{descLoaded, descPromptTok, descGenTok, descRequests, descRejected, descSteps,
		descRows, descForward, descQueue, descActive, descSlots, descOccupancy, descCachedTok, descPreempted, descKVPages}
)

func (c engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range engineMetricSet {
		ch <- d
	}
}

func (c engineCollector) Collect(ch chan<- prometheus.Metric) {
	var loaded, occ float64
	var st struct {
		requests, rejected, prompt, gen, steps, rows int64
		cached, preempted                            int64
		forward                                      time.Duration
		queued, active, slots                        int
		pages, free, cachedPages                     int
	}
	if b := c.s.be.Load(); b != nil {
		loaded = 1
		s := b.eng.Stats()
		st.requests, st.rejected, st.prompt, st.gen, st.steps, st.rows = s.Requests, s.Rejected, s.PromptTokens, s.GeneratedTokens, s.Steps, s.BatchRows
		st.forward, st.queued, st.active, st.slots = s.ForwardTime, s.Queued, s.Active, s.Slots
		st.cached, st.preempted, st.pages, st.free, st.cachedPages = s.CachedTokens, s.Preempted, s.KVPages, s.KVPagesFree, s.KVPagesCached
		if s.Slots > 0 {
			occ = float64(s.Active) / float64(s.Slots)
		}
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	gauge(descLoaded, loaded)
	counter(descPromptTok, float64(st.prompt))
	counter(descGenTok, float64(st.gen))
	counter(descRequests, float64(st.requests))
	counter(descRejected, float64(st.rejected))
	counter(descSteps, float64(st.steps))
	counter(descRows, float64(st.rows))
	counter(descForward, st.forward.Seconds())
	gauge(descQueue, float64(st.queued))
	gauge(descActive, float64(st.active))
	gauge(descSlots, float64(st.slots))
	gauge(descOccupancy, occ)
	counter(descCachedTok, float64(st.cached))
	counter(descPreempted, float64(st.preempted))
	for _, p := range []struct {
		state string
		n     int
	}{{"free", st.free}, {"cached", st.cachedPages}, {"total", st.pages}} {
		ch <- prometheus.MustNewConstMetric(descKVPages, prometheus.GaugeValue, float64(p.n), p.state)
	}
}
