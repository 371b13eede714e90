package mmap

import "golang.org/x/sys/unix"

// adviseHuge asks Linux to map the file with 2 MiB pages where the page
// cache holds it in folios that large (madvise MADV_HUGEPAGE; readahead
// then makes them so on ext4, XFS and tmpfs): a decode step streams every
// weight once, and with 4 KiB pages each 32 KiB read also walks the page
// tables past caches the weights keep evicting. It is advice: a kernel
// without transparent huge pages refuses it, and the mapping works as
// before. Figures: bench/README.md.
func adviseHuge(b []byte) {
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
}
