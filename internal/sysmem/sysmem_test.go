package sysmem

import "testing"

func TestParseMeminfo(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   23000000 kB\n", 23000000 * 1024, true},
		{"MemTotal:       24000000 kB\n", 0, false},
		{"MemAvailable: lots kB\n", 0, false},
		{"MemAvailable: -5 kB\n", 0, false},
	}
	for _, c := range cases {
		got, ok := parseMeminfo([]byte(c.in))
		if got != c.want || ok != c.ok {
			t.Errorf("parseMeminfo(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestCgroupRoom(t *testing.T) {
	if p, ok := cgroupPath([]byte("12:cpu:/x\n0::/user.slice/a.scope\n")); !ok || p != "/user.slice/a.scope" {
		t.Errorf("cgroupPath = %q, %v", p, ok)
	}
	if _, ok := cgroupPath([]byte("12:cpu:/x\n")); ok {
		t.Error("cgroup v1 only: want no path")
	}
	cases := []struct {
		max, cur string
		want     int64
		ok       bool
	}{
		{"max\n", "100\n", 0, false},
		{"1000\n", "300\n", 700, true},
		{"1000\n", "3000\n", 0, true},
		{"1000\n", "", 1000, true},
		{"", "", 0, false},
	}
	for _, c := range cases {
		got, ok := room(c.max, c.cur)
		if got != c.want || ok != c.ok {
			t.Errorf("room(%q, %q) = %d, %v; want %d, %v", c.max, c.cur, got, ok, c.want, c.ok)
		}
	}
}

func TestAvailableHere(t *testing.T) {
	if a, ok := Available(); ok && a <= 0 {
		t.Errorf("Available = %d", a)
	}
}
