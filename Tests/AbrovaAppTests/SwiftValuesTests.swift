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
