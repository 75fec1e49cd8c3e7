/// Which release of AbrovaSync this is: one number for the SDK, the server and the CLI, which
/// ship together. The protocol has its own version, in its routes (`/v1/`).
public enum AbrovaRelease {
    public static let version = "0.2.0-dev"
}
