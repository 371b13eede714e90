package mpitest

import (
	"slices"
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want Flavour
	}{
		{"mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n", OpenMPI},
		{"mpirun (OpenRTE) 3.1.3\n", OpenMPI},
		{"HYDRA build details:\n    Version:                                 4.0.2\n", Hydra},
		{"Intel(R) MPI Library for Linux* OS, Version 2021.6\nHYDRA build details:\n", Hydra},
		{"srun: unrecognized option '--version'\n", 0},
		{"", 0},
	} {
		got, err := ParseVersion(tc.out)
		if got != tc.want || (err != nil) != (tc.want == 0) {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", tc.out, got, err, tc.want)
		}
	}
}

func TestArgs(t *testing.T) {
	env := []string{"A=1", "B=x=y", "C="}
	one := []App{{2, []string{"/bin/t", "-test.run", "^X"}}}
	mpmd := []App{{1, []string{"/bin/t", "logits", "-m", "a"}}, {3, []string{"/bin/t", "logits", "-m", "b"}}}
	ompi := "--allow-run-as-root --oversubscribe --mca btl_vader_single_copy_mechanism none"
	for _, tc := range []struct {
		f    Flavour
		env  []string
		apps []App
		want string
	}{
		{OpenMPI, nil, one, ompi + " -n 2 /bin/t -test.run ^X"},
		{OpenMPI, env, one, ompi + " -x A=1 -x B=x=y -x C= -n 2 /bin/t -test.run ^X"},
		{OpenMPI, env, mpmd, ompi + " -x A=1 -x B=x=y -x C= -n 1 /bin/t logits -m a : -n 3 /bin/t logits -m b"},
		{Hydra, nil, one, "-n 2 /bin/t -test.run ^X"},
		{Hydra, env, one, "-genv A 1 -genv B x=y -genv C  -n 2 /bin/t -test.run ^X"},
		{Hydra, env, mpmd, "-genv A 1 -genv B x=y -genv C  -n 1 /bin/t logits -m a : -n 3 /bin/t logits -m b"},
	} {
		l := &Launcher{Path: "mpirun", Flavour: tc.f}
		if got := strings.Join(l.Args(tc.env, tc.apps...), " "); got != tc.want {
			t.Errorf("%v %v %v:\n got %s\nwant %s", tc.f, tc.env, tc.apps, got, tc.want)
		}
	}
	cmd := (&Launcher{Path: "mpiexec.hydra", Flavour: Hydra}).Command(env, one...)
	if cmd.Args[0] != "mpiexec.hydra" || !slices.Contains(cmd.Env, "B=x=y") {
		t.Errorf("Command: %v, env %v", cmd.Args, cmd.Env)
	}
}

func TestRank(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want int
		ok   bool
	}{
		{[]string{"OMPI_COMM_WORLD_RANK=1", "PMIX_RANK=1"}, 1, true},
		{[]string{"PMI_RANK=3", "PMI_SIZE=4", "PMI_FD=6"}, 3, true},
		{[]string{"PMIX_RANK=0"}, 0, true},
		{[]string{"HOME=/root"}, 0, false},
		{[]string{"PMI_RANK=", "PMI_RANK_X=1"}, 0, false},
		{[]string{"PMI_RANK=-1"}, 0, false},
	} {
		r, ok := Rank(Getenv(tc.env))
		if r != tc.want || ok != tc.ok {
			t.Errorf("Rank(%v) = %d, %v; want %d, %v", tc.env, r, ok, tc.want, tc.ok)
		}
	}
}
