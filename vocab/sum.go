package vocab

// BlockSum is the checksum of an extended bucket's block that the slot's
// state word 1 holds (shm/format.go): the wrapping sum over i of
// BlockTerm(i, w[i]). Each word is mixed with its index, so the sum changes
// when any word does, moved words included, and a change of one word
// updates it in O(1): add the new term, subtract the old.
func BlockSum(w []int64) int64 {
	var sum uint64
	for i, v := range w {
		sum += BlockTerm(i, v)
	}
	return int64(sum)
}

// BlockTerm is word i's term of BlockSum when it holds v:
// mix(uint64(v) ^ (i+1)*0x9E3779B97F4A7C15), where mix is splitmix64's
// finalizer.
func BlockTerm(i int, v int64) uint64 {
	x := uint64(v) ^ (uint64(i)+1)*0x9E3779B97F4A7C15
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return x
}
