import AbrovaSync
import Foundation
import Testing

/// An app writes its own Swift values and reads them back, through the public API only, against
/// `abrova serve`. (This module also declares its own `Value`, `FieldValue` and `Source`, as an app
/// may: nothing here needs the SDK's by name.)
@Suite(.timeLimit(.minutes(2))) struct SwiftValuesTests {
    @Test func fieldsGivenAsSwiftVariablesRoundTripThroughTheServer() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        let tablet = try server.device("tablet")
        let name = "milk"
        let qty = 2
        let price = 1.25
        let fresh = true
        let tags = ["dairy", "cold"]
        let stock: [String: Int] = ["oslo": 3]
        let note: String? = nil
        let weight: Float = 0.5
        let shelf: Int32 = 7

        let cart = phone.collection("carts").document("c1")
        try await cart.setData([
            "name": name, "qty": qty, "price": price, "fresh": fresh, "tags": tags, "stock": stock, "note": note,
            "weight": weight, "shelf": shelf, "plain": "literal", "count": 1,
        ])
        try await cart.updateData(["qty": qty + 1, "labels": .arrayUnion([name]), "stock.bergen": qty * 2, "shelf": .delete()])
        let added = try await phone.collection("carts").add(data: ["name": name, "qty": qty])

        let snapshot = try await tablet.collection("carts").document("c1").getDocument(source: .server)
        #expect(snapshot.documentID == "c1")
        #expect(snapshot.get("name")?.stringValue == "milk")
        #expect(snapshot.get("qty")?.intValue == 3)
        #expect(snapshot.get("qty")?.doubleValue == 3)
        #expect(snapshot.get("price")?.doubleValue == 1.25)
        #expect(snapshot.get("price")?.intValue == nil)
        #expect(snapshot.get("fresh")?.boolValue == true)
        #expect(snapshot.get("tags")?.arrayValue?.compactMap(\.stringValue) == ["dairy", "cold"])
        #expect(snapshot.get("labels")?.arrayValue?.compactMap(\.stringValue) == ["milk"])
        #expect(snapshot.get("stock.oslo")?.intValue == 3)
        #expect(snapshot.get("stock.bergen")?.intValue == 4)
        #expect(snapshot.get("stock")?.mapValue?.count == 2)
        #expect(snapshot.get("note") == AbrovaSync.Value.null)
        #expect(snapshot.get("weight")?.doubleValue == 0.5)
        #expect(snapshot.get("shelf") == nil)
        #expect(snapshot.get("plain")?.stringValue == "literal" && snapshot.get("count")?.intValue == 1)
        #expect(snapshot.get("nothing.here") == nil && snapshot.get("bad..path") == nil && snapshot.get("") == nil)

        let other = try await tablet.collection("carts").document(added.documentID).getDocument(source: .server)
        #expect(other.documentID == added.documentID && other.get("qty")?.intValue == 2)
        await phone.close()
        await tablet.close()
    }

    struct Receipt: Codable, Equatable {
        var total: Double
        var paidAt: Date
        var signature: Data
        var refundedAt: Date?
    }

    /// `Date` and `Data` are stored as timestamps and bytes (not strings or numbers), from
    /// dictionaries and from `Codable` types, read back as `Date` and `Data` on another device, and
    /// compared as times by queries.
    @Test func datesAndDataRoundTripAsTimestampsAndBytes() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        let tablet = try server.device("tablet")
        // Whole milliseconds survive exactly; the SDK keeps microseconds.
        let when = Date(timeIntervalSince1970: 1_764_795_600.125)
        let blob = Data([0, 1, 2, 0xFF])
        let dates = [when, when.addingTimeInterval(60)]
        let orders = phone.collection("orders")
        try await orders.document("o1").setData(["when": when, "blob": blob, "dates": dates, "sizes": ["small": Data([1])]])
        try await orders.document("o2").setData(["when": when.addingTimeInterval(-3600)])
        try await orders.document("o1").updateData(["shipped": when.addingTimeInterval(86_400), "log": .arrayUnion([blob])])
        let receipt = Receipt(total: 9.5, paidAt: when, signature: Data("signed".utf8), refundedAt: nil)
        try await orders.document("r1").setData(from: receipt)

        let snapshot = try await tablet.collection("orders").document("o1").getDocument(source: .server)
        #expect(snapshot.get("when")?.dateValue == when)
        #expect(snapshot.get("when")?.timestampValue == Timestamp(microsecondsSince1970: 1_764_795_600_125_000))
        #expect(snapshot.get("when")?.stringValue == nil && snapshot.get("when")?.doubleValue == nil)
        #expect(snapshot.get("blob")?.dataValue == blob)
        #expect(snapshot.get("dates")?.arrayValue?.compactMap(\.dateValue) == dates)
        #expect(snapshot.get("sizes.small")?.dataValue == Data([1]))
        #expect(snapshot.get("shipped")?.dateValue == when.addingTimeInterval(86_400))
        #expect(snapshot.get("log")?.arrayValue?.compactMap(\.dataValue) == [blob])

        let stored = try await tablet.collection("orders").document("r1").getDocument(source: .server)
        #expect(stored.get("paidAt")?.dateValue == when, "a Date field is a timestamp")
        #expect(stored.get("signature")?.dataValue == Data("signed".utf8), "a Data field is bytes")
        #expect(try stored.data(as: Receipt.self) == receipt)

        let recent = try await tablet.collection("orders").whereField("when", isGreaterThan: when.addingTimeInterval(-60)).getDocuments()
        #expect(recent.map(\.documentID) == ["o1"])
        let ordered = try await tablet.collection("orders").whereField("when", isLessThanOrEqualTo: when).order(by: "when").getDocuments()
        #expect(ordered.map(\.documentID) == ["o2", "o1"])
        #expect(try await tablet.collection("orders").whereField("blob", isEqualTo: blob).getDocuments().map(\.documentID) == ["o1"])
        await #expect(throws: AbrovaSyncError.self, "a range over bytes cannot run") {
            try await tablet.collection("orders").whereField("blob", isLessThan: blob).getDocuments(source: .cache)
        }
        await phone.close()
        await tablet.close()
    }

    /// A date no timestamp can hold, and a map key the JSON forms reserve, are refused with words.
    @Test func datesOutOfRangeAndDollarNamesAreRefused() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        let doc = phone.collection("orders").document("bad")
        let farFuture = Date(timeIntervalSince1970: 400_000_000_000)
        let error = await #expect(throws: AbrovaSyncError.self) { try await doc.setData(["when": farFuture]) }
        #expect(error?.reason == .invalid && error?.message.contains("0000 to 9999") == true, "\(String(describing: error))")
        await #expect(throws: AbrovaSyncError.self) { try await doc.setData(["price": ["$timestamp": "2026-01-01T00:00:00.000000Z"]]) }
        #expect(try await doc.getDocument(source: .cache).exists == false)
        await phone.close()
    }

    /// What already compiled still does, beside Swift values: the SDK's `Value` cases and the
    /// `FieldValue` sentinels, spelled as the README and the seed spell them.
    @Test func valuesAndSentinelsStillWriteAsBefore() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        let cart = phone.collection("carts").document("c2")
        let fields: [String: AbrovaSync.Value] = ["owner": .string("ana"), "qty": ["milk": 1]]
        try await cart.setData(fields)
        try await cart.setData(["owner": .string("ana"), "qty": ["milk": 1], "items": ["milk"]])
        try await cart.updateData([
            "items": .arrayUnion([.string("eggs")]), "qty.eggs": .value(.int(6)), "qty.milk": .delete(), "note": "ring",
        ])
        try await cart.updateData(["items": .arrayRemove(["milk"]), "note": AbrovaSync.FieldValue.remove])
        let snapshot = try await cart.getDocument(source: .server)
        #expect(snapshot.data == ["owner": "ana", "qty": ["eggs": 6], "items": ["eggs"]])
        await phone.close()
    }
}
