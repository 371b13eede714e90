package tokenizer_test

import (
	"fmt"
	"log"
	"strings"

	"github.com/grok-go/grok/tokenizer"
)

func Example() {
	tok, err := tokenizer.Load("testdata/tokenizer.model")
	if err != nil {
		log.Fatal(err)
	}
	ids := tok.Encode("Hello world")
	fmt.Println(ids)
	text, err := tok.Decode(ids)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q\n", text)
	// Output:
	// [11770 1135]
	// "Hello world"
}

func ExampleStreamDecoder() {
	tok, err := tokenizer.Load("testdata/tokenizer.model")
	if err != nil {
		log.Fatal(err)
	}
	// "the", then 👨 as four byte-fallback pieces: the decoder holds the
	// bytes back until the character is complete.
	d := tok.NewDecoder()
	var chunks []string
	for _, id := range []int{333, 309, 228, 214, 237} {
		chunk, err := d.Add(id)
		if err != nil {
			log.Fatal(err)
		}
		chunks = append(chunks, chunk)
	}
	chunks = append(chunks, d.Flush())
	fmt.Printf("%q\n", chunks)
	fmt.Println(strings.Join(chunks, ""))
	// Output:
	// ["the" "" "" "" "👨" ""]
	// the👨
}
