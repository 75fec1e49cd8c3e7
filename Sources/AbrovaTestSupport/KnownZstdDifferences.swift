/// Where the pure-Swift zstd decoder (AbrovaZstd) refuses what libzstd 1.5.4 accepts: refusals
/// RFC 8878 justifies, each named by the decoder's message. The differential tests and the
/// `zstd-pure` fuzz target forgive exactly these; any other disagreement is a finding.
public enum KnownZstdDifferences {
    /// Refusals that are justified by RFC 8878 but that libzstd's one-shot
    /// decoder does not make.
    public static func isStricterThanLibzstd(refusing message: String, input: [UInt8]) -> Bool {
        switch message {
        case "a sequence refers back beyond the window":
            // libzstd's one-shot ZSTD_decompress lets a match reach anywhere in the
            // frame's output; RFC 8878 limits offsets to the window size.
            return true
        case "one of four Huffman-coded literal streams does not end where its size says",
            "one of four Huffman-coded literal streams does not end with a marker bit":
            // libzstd 1.5.4's fast 4-stream Huffman path only checks that each
            // stream produced its share of literals; a stream that stops short or
            // reads on into its neighbour's bytes is accepted (and what it decodes
            // then depends on the neighbour). Its 1-stream and slow paths require
            // the exact end, as we always do.
            return true
        case "a sequences bitstream reads past its start":
            // libzstd only rejects a sequences bitstream that has bits left over;
            // one whose last reads run past its first byte (reading zeros) is
            // accepted. RFC 8878 expects the bitstream to be consumed exactly.
            return true
        case "a sequences bitstream has unused bits where state updates would be":
            // libzstd also reads FSE state updates after the last sequence, so it
            // accepts a bitstream whose leftover bits fit in those updates.
            return true
        case "a block decodes to more than the block maximum size":
            // RFC 8878 bounds a block's decompressed content by Block_Maximum_Size (the
            // smaller of Window_Size and 128 KiB); libzstd's one-shot decoder bounds it by
            // the output buffer only, so a damaged frame whose header declares a smaller
            // window than its blocks fill is accepted there.
            return true
        case "a sequences header has reserved bits set":
            // libzstd ignores the two reserved bits of the compression modes byte;
            // the format requires them to be zero.
            return true
        case "the input is empty":
            // ZSTD_decompress returns 0 bytes for an empty input; our API treats
            // an empty body as corrupt on purpose (a missing body is an error).
            return input.isEmpty
        default:
            return false
        }
    }
}
