/// A point in time to the microsecond, in UTC: what a timestamp field holds.
///
/// Its text form is RFC 3339 with exactly six digits of fraction and `Z`
/// (`2026-12-03T21:00:00.123456Z`), always 27 characters, so that text order is time order. A
/// stored timestamp lies within the years 0000 to 9999 (`isStorable`); writing one outside is
/// refused (`ValueError.notRepresentable`).
public struct Timestamp: Hashable, Comparable, Sendable {
    /// Microseconds since 1970-01-01T00:00:00Z (negative before).
    public var microsecondsSince1970: Int64

    /// The timestamp `microsecondsSince1970` microseconds after the Unix epoch.
    public init(microsecondsSince1970: Int64) {
        self.microsecondsSince1970 = microsecondsSince1970
    }

    /// The timestamp `seconds` after the Unix epoch, rounded to the nearest microsecond (a NaN
    /// reads as the epoch; beyond Int64's range, its end).
    public init(secondsSince1970 seconds: Double) {
        let microseconds = (seconds * 1_000_000).rounded()
        if microseconds.isNaN {
            self.init(microsecondsSince1970: 0)
        } else if microseconds >= 0x1p63 {
            self.init(microsecondsSince1970: .max)
        } else if microseconds < -0x1p63 {
            self.init(microsecondsSince1970: .min)
        } else {
            self.init(microsecondsSince1970: Int64(microseconds))
        }
    }

    /// Seconds since the Unix epoch, as a `Double` (what `Date` is made from).
    public var secondsSince1970: Double {
        let seconds = microsecondsSince1970.quotientAndRemainder(dividingBy: 1_000_000)
        return Double(seconds.quotient) + Double(seconds.remainder) / 1_000_000
    }

    public static func < (left: Timestamp, right: Timestamp) -> Bool {
        left.microsecondsSince1970 < right.microsecondsSince1970
    }

    /// The earliest storable timestamp, 0000-01-01T00:00:00.000000Z.
    public static let earliestStorable = Timestamp(microsecondsSince1970: -62_167_219_200_000_000)
    /// The latest storable timestamp, 9999-12-31T23:59:59.999999Z.
    public static let latestStorable = Timestamp(microsecondsSince1970: 253_402_300_799_999_999)

    /// Whether the timestamp lies within the years 0000 to 9999, where its text form is defined.
    public var isStorable: Bool { (Self.earliestStorable...Self.latestStorable).contains(self) }
}

extension Timestamp: CustomStringConvertible {
    /// The RFC 3339 form, `2026-12-03T21:00:00.123456Z`; outside the storable years, the number of
    /// microseconds.
    public var description: String {
        guard isStorable else { return "\(microsecondsSince1970) µs since 1970" }
        var bytes: [UInt8] = []
        writeRFC3339(to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends the 27 characters of the RFC 3339 form. The timestamp must be storable.
    package func writeRFC3339(to bytes: inout [UInt8]) {
        let (days, microsecondOfDay) = Self.floorDivision(microsecondsSince1970, 86_400_000_000)
        let date = CivilDate(daysSince1970: days)
        let seconds = microsecondOfDay / 1_000_000
        func digits(_ value: Int64, _ count: Int) {
            var divisor: Int64 = 1
            for _ in 1..<count { divisor *= 10 }
            while divisor > 0 {
                bytes.append(UInt8(ascii: "0") + UInt8((value / divisor) % 10))
                divisor /= 10
            }
        }
        digits(date.year, 4)
        bytes.append(UInt8(ascii: "-"))
        digits(date.month, 2)
        bytes.append(UInt8(ascii: "-"))
        digits(date.day, 2)
        bytes.append(UInt8(ascii: "T"))
        digits(seconds / 3600, 2)
        bytes.append(UInt8(ascii: ":"))
        digits(seconds / 60 % 60, 2)
        bytes.append(UInt8(ascii: ":"))
        digits(seconds % 60, 2)
        bytes.append(UInt8(ascii: "."))
        digits(microsecondOfDay % 1_000_000, 6)
        bytes.append(UInt8(ascii: "Z"))
    }

    /// Reads the exact form `writeRFC3339` writes; `nil` for anything else (another length, offset
    /// or precision, a month 13, a February 30th, a 24th hour, a leap second).
    package init?(rfc3339 text: some Collection<UInt8>) {
        let bytes = Array(text)
        guard bytes.count == 27 else { return nil }
        let separators: [(Int, Unicode.Scalar)] = [(4, "-"), (7, "-"), (10, "T"), (13, ":"), (16, ":"), (19, "."), (26, "Z")]
        for (offset, separator) in separators where bytes[offset] != UInt8(ascii: separator) {
            return nil
        }
        func number(_ range: Range<Int>) -> Int64? {
            var value: Int64 = 0
            for byte in bytes[range] {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
                value = value * 10 + Int64(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10), let hour = number(11..<13),
            let minute = number(14..<16), let second = number(17..<19), let fraction = number(20..<26),
            (1...12).contains(month), day >= 1, day <= CivilDate.daysIn(month: month, year: year), hour < 24, minute < 60, second < 60
        else { return nil }
        let days = CivilDate(year: year, month: month, day: day).daysSince1970
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second
        self.init(microsecondsSince1970: seconds * 1_000_000 + fraction)
    }

    /// Division rounding toward minus infinity, with a remainder that is never negative.
    private static func floorDivision(_ value: Int64, _ divisor: Int64) -> (quotient: Int64, remainder: Int64) {
        let (quotient, remainder) = value.quotientAndRemainder(dividingBy: divisor)
        return remainder < 0 ? (quotient - 1, remainder + divisor) : (quotient, remainder)
    }
}

/// A day of the proleptic Gregorian calendar, converted to and from days since 1970-01-01 by
/// counting 400-year eras (146,097 days each) from 0000-03-01, so that a leap day ends each year.
private struct CivilDate {
    var year: Int64
    var month: Int64
    var day: Int64

    init(year: Int64, month: Int64, day: Int64) {
        (self.year, self.month, self.day) = (year, month, day)
    }

    init(daysSince1970: Int64) {
        let shifted = daysSince1970 + 719_468 // days from 0000-03-01 to 1970-01-01
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        day = dayOfYear - (153 * monthFromMarch + 2) / 5 + 1
        month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9
        year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
    }

    var daysSince1970: Int64 {
        let marchYear = month <= 2 ? year - 1 : year
        let era = (marchYear >= 0 ? marchYear : marchYear - 399) / 400
        let yearOfEra = marchYear - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }
}
