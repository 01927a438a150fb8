/** Every root field, by area. Importing this registers them on the builder. */
import './definitions.ts'
import './health.ts'
import './liveSubscriptions.ts'
import './runPage.ts'
import './runs.ts'
import './steps.ts'
import './subscriptions.ts'
import './viewer.ts'
