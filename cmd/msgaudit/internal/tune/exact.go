package tune

import (
	"math"
	"slices"
)

// Exact is what an exact set of every id says about a trace, with no
// window and no producer cap.
type Exact struct {
	// Messages counts records; Duplicates those whose id was seen before
	// on the same destination.
	Messages, Duplicates int
	// Destinations counts distinct destinations; Producers is the largest
	// number of distinct producers on one destination (what one audit must
	// hold to never evict).
	Destinations, Producers int
	// Distances holds, sorted, the redelivery distance of every duplicate:
	// how far its sequence lies below the highest sequence its producer
	// had reached on that destination when it arrived. A window of depth
	// d catches a duplicate at distance <= d (if the producer was not
	// evicted meanwhile).
	Distances []uint64

	// prev[i] is the index of the previous record with the same stream and
	// sequence, or -1.
	prev []int32
}

// MaxDistance returns the largest redelivery distance, 0 without duplicates.
func (e *Exact) MaxDistance() uint64 {
	if len(e.Distances) == 0 {
		return 0
	}
	return e.Distances[len(e.Distances)-1]
}

// DepthFor returns the smallest depth whose window covers at least the
// fraction target of the duplicates' distances (ignoring evictions); 0
// without duplicates.
func (e *Exact) DepthFor(target float64) uint64 {
	if len(e.Distances) == 0 {
		return 0
	}
	k := int(math.Ceil(target*float64(len(e.Distances)))) - 1
	k = max(0, min(k, len(e.Distances)-1))
	return e.Distances[k]
}

type streamSeq struct {
	stream uint32
	seq    uint64
}

// Analyze runs the exact set over t.
func Analyze(t *Trace) *Exact {
	e := &Exact{Messages: len(t.Records), Destinations: len(t.Dests), prev: make([]int32, len(t.Records))}
	perDest := make([]int, len(t.Dests))
	for _, sk := range t.streamKey {
		perDest[sk[0]]++
	}
	if len(perDest) > 0 {
		e.Producers = slices.Max(perDest)
	}
	last := make(map[streamSeq]int32, len(t.Records))
	high := make([]uint64, len(t.streamKey))
	seen := make([]bool, len(t.streamKey))
	for i, r := range t.Records {
		k := streamSeq{r.Stream, r.Seq}
		p, ok := last[k]
		if ok {
			e.prev[i] = p
			e.Duplicates++
			e.Distances = append(e.Distances, high[r.Stream]-r.Seq)
		} else {
			e.prev[i] = -1
		}
		last[k] = int32(i)
		if !seen[r.Stream] || r.Seq > high[r.Stream] {
			high[r.Stream] = r.Seq
			seen[r.Stream] = true
		}
	}
	slices.Sort(e.Distances)
	return e
}
